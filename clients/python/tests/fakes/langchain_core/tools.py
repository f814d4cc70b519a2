"""Test stand-in for langchain_core.tools: BaseTool and ToolException with
the attributes and call path of the real ones (run/invoke validate the input
against args_schema, call _run with run_manager when it takes one, and turn a
ToolException into the observation when handle_tool_error is set)."""
import inspect


class ToolException(Exception):
    pass


class BaseTool:
    name = None
    description = None
    args_schema = None
    handle_tool_error = False
    return_direct = False

    def __init__(self, **kwargs):
        for k, v in kwargs.items():
            if not hasattr(type(self), k):
                raise TypeError(f"{type(self).__name__} has no field {k!r}")
            setattr(self, k, v)
        if not isinstance(self.name, str) or not isinstance(self.description, str):
            raise TypeError("a tool needs a name and a description")

    def _run(self, *args, **kwargs):
        raise NotImplementedError

    def _schema(self):
        s = self.args_schema
        if isinstance(s, dict):
            return s
        raise TypeError(f"this stand-in understands JSON-schema dicts only, not {s!r}")

    def _parse_input(self, tool_input):
        schema = self._schema()
        props = schema.get("properties", {})
        if isinstance(tool_input, str):
            first = schema.get("required", list(props))[0]
            tool_input = {first: tool_input}
        missing = [k for k in schema.get("required", []) if k not in tool_input]
        extra = [k for k in tool_input if k not in props]
        if missing or extra:
            raise ValueError(f"invalid tool input: missing {missing}, unexpected {extra}")
        return dict(tool_input)

    def run(self, tool_input, **kwargs):
        args = self._parse_input(tool_input)
        if "run_manager" in inspect.signature(self._run).parameters:
            args["run_manager"] = None
        try:
            return self._run(**args)
        except ToolException as e:
            if not self.handle_tool_error:
                raise
            if isinstance(self.handle_tool_error, str):
                return self.handle_tool_error
            if callable(self.handle_tool_error) and self.handle_tool_error is not True:
                return self.handle_tool_error(e)
            return e.args[0] if e.args else "Tool execution error"

    def invoke(self, input, config=None, **kwargs):
        if isinstance(input, dict) and input.get("type") == "tool_call":
            return {"type": "tool", "tool_call_id": input["id"], "name": self.name,
                    "content": self.run(input["args"])}
        return self.run(input)
