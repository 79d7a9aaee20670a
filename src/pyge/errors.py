"""One exception family for everything a user can cause.

Every message is one line and names the culprit (file, node, option, pass).
"""
from __future__ import annotations


def text_of(obj: object) -> str:
    """str(obj), or a stand-in when the object's own __str__ raises (user code may)."""
    try:
        return str(obj)
    except Exception:  # noqa: BLE001
        return f"<{type(obj).__name__} that cannot be printed>"


class PygeError(Exception):
    """Root of every error pyge raises on purpose."""


class ModelLoadError(PygeError):
    """A model file is missing, unreadable, corrupt, or not a model."""


class GraphError(PygeError):
    """The graph itself is malformed (cycle, dangling value, duplicate name)."""


class GraphCycleError(GraphError):
    """The graph has a cycle, so no topological order exists. `nodes`: the names of the
    nodes on one cycle, in data-flow order."""

    def __init__(self, message: str, nodes: list[str] | tuple[str, ...] = ()):
        self.nodes = list(nodes)
        super().__init__(message)


class GraphTypeError(GraphError):
    """A node's input types, dims or attributes contradict its operator (ONNX type and shape
    inference refuses it, as onnxruntime does). `node`: the node's name."""

    def __init__(self, message: str, node: str = ""):
        self.node = node
        super().__init__(message)


class ModelGraphCycleError(GraphCycleError, ModelLoadError):
    """A model file's graph has a cycle: a GraphCycleError, and a ModelLoadError as every
    other reason a model file cannot be loaded."""


class UnsupportedOperatorError(PygeError):
    """One or more operators have no kernel. Raised at load/compile time, never mid-run."""

    def __init__(self, missing: dict[str, str]):
        # missing: op type (with opset) -> one node name using it
        self.missing = dict(missing)
        parts = ", ".join(f"{op} (node {name!r})" for op, name in sorted(self.missing.items()))
        super().__init__(f"unsupported operator(s): {parts}")


class OptionError(PygeError):
    """An unknown option key or a malformed option value."""


class PassError(PygeError):
    """A compiler pass (built-in or custom) failed."""


class PreconditionError(PassError):
    """A pass was about to run on a state that lacks what it requires (a pipeline bug)."""


class PostconditionError(PassError):
    """A pass finished without establishing what it ensures (a pass bug)."""


class InvariantError(PostconditionError):
    """A pass broke a fact an earlier pass had established (checked by InvariantInstrument)."""


class CustomPassError(PassError):
    """A custom pass returned a failure status or raised (`code` says which), or, for a graph
    pass, left a graph the compiler cannot go on with (`code` None, the message says what)."""

    def __init__(self, pass_name: str, code, message: str, kind: str = "stream pass",
                 stage: str | None = None):
        self.pass_name = pass_name
        self.code = code
        self.pass_message = message
        self.kind = kind
        self.stage = stage
        # One line, as every message: a pass's message or exception may span several.
        text = " ".join(line.strip() for line in text_of(message).splitlines() if line.strip())
        head = f"custom {kind} {pass_name!r}" + (f" (stage {stage})" if stage else "")
        if code is None:
            super().__init__(f"{head} {text}")
        else:
            super().__init__(f"{head} failed with return code {code}: {text or '(no message)'}")


class PluginError(PygeError):
    """A custom-pass plugin could not be loaded or was refused."""


class PlanError(PygeError):
    """The execution plan is inconsistent (e.g. verify() found an unordered pair)."""


class VerificationError(PlanError):
    """verify() found a dependency or buffer reuse that is not ordered across streams."""


class InputError(PygeError):
    """A feed is missing, unexpected, or of the wrong dtype or shape."""


class ExecutionError(PygeError):
    """A kernel failed while running; the message names the node."""

    def __init__(self, node_desc: str, cause: BaseException):
        self.node = node_desc
        self.cause = cause
        text = text_of(cause).strip()
        msg = text.splitlines()[0] if text else type(cause).__name__
        super().__init__(f"while executing {node_desc}: {type(cause).__name__}: {msg}")


class DistributedError(PygeError):
    """A model's collectives have no usable torch.distributed process group, or their
    attributes do not fit the group (group_size is not its size)."""


class ModelFileError(PygeError):
    """An offline model (.pgm) is corrupt, truncated, or of a newer version."""


class DumpError(PygeError):
    """A graph dump could not be written (e.g. the dump folder is not writable)."""
