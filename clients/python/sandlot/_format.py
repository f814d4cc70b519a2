"""Results as text for a language model."""


def format_code_result(r, max_chars=20000):
    """A CodeResult as text for a model: stdout, stderr, the value of the
    last expression, the error report, and what happened on a timeout."""
    parts = []
    if r.stdout:
        parts.append(r.stdout.rstrip("\n"))
    if r.stderr:
        parts.append("[stderr]\n" + r.stderr.rstrip("\n"))
    for d in r.displays:
        mimes = sorted((d.get("data") or {}).keys())
        if mimes:
            parts.append(f"[display: {', '.join(mimes)}]")
    if r.value is not None:
        parts.append(f"Out: {r.value}")
    if r.status == "timeout":
        parts.append("[timed out: the run was interrupted" +
                     ("; the interpreter was restarted and its state is lost]" if r.state_lost
                      else "; variables defined before are kept]"))
    elif r.error:
        parts.append(r.error_text)
    if r.state_lost and r.status != "timeout":
        parts.append("[the interpreter died; its state is lost and the next run starts fresh]")
    if r.exit_code not in (None, 0):
        parts.append(f"[exit status {r.exit_code}]")
    text = "\n".join(parts)
    if len(text) > max_chars:
        text = text[:max_chars] + f"\n[output truncated: {len(text)} characters, first {max_chars} shown]"
    return text
