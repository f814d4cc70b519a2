"""The fleet tests run with the integration suite's fixtures and checks
(sanitizer reports fail a test, nothing of the session may be left on the
host): its conftest is loaded here under another name and re-exported, so
that `from conftest import ...` in its helpers (daemon.py) finds them too.
Run the fleet tests in a pytest invocation of their own (scripts/check.sh
does): with tests/integration in the same one, its hooks would run twice."""
import importlib.util
import sys
from pathlib import Path

INTEGRATION = Path(__file__).resolve().parents[1] / "integration"
sys.path.insert(0, str(INTEGRATION))
sys.path.insert(0, str(Path(__file__).resolve().parent))
_spec = importlib.util.spec_from_file_location("sandlot_integration_conftest", INTEGRATION / "conftest.py")
_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)
globals().update({k: v for k, v in vars(_mod).items() if not k.startswith("__")})
