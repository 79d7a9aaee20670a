"""Straight-line Python for the steps one thread runs, generated and compiled once per plan.

An interpreter loop pays on every operator for unpacking a step, testing its kind, building
the argument list in a comprehension and zipping the results into the value table. As
torch.fx turns a graph into Python source, `compile_program` writes a program (the steps
one thread runs: a stream's launches, records and waits) out as the body of a function:

    def pyge_model_p1_c0(env, job):
        flags = job.flags
        ni = -1
        try:
            if not flags[3]: job.wait(3)          # Recv: sleep only if not yet recorded
            if job.aborted: return True           # another stream failed: stop
            ni = 12
            r = k12([env[4], v9])                 # the kernel: a list in, a list out
            if r.__class__ is not list or len(r) != 1: r = fix(12, r)
            v13 = r[0]
            r = None
            v13.__class__ is Tensor or check(12, 0, v13)
            v9 = None                             # released here (plan's free_after)
            if job.aborted: return True
            ni = 13
            env[14] = d13(v13, env[2])            # a direct kernel (kernels._util.direct)
            ni = 14
            v15 = o14(env[14], env[3], out=b14)   # into a planned buffer (into.py)
            job.record(5)                         # Send
            ...
        except Aborted: return True
        except KeyboardInterrupt as err:          # Ctrl-C in the caller: leave at once
            job.fail(ni, 1, err); raise
        except BaseException as err:              # reported by the caller, naming node ni
            job.fail(ni, 1, err); return True
        return False

Values: one that a single program produces, reads and releases (and that is no model
output) lives in a local variable; every other value goes through the shared table `env`
(indexed by plan value), where other threads and the caller find it. A kernel's result is
checked where it is produced: a list of exactly the node's outputs, each of its value's kind
(a tensor for a tensor value, a list for a sequence), so that a faulty kernel is named, not
the next node that reads its result (pyge's own direct kernels, kernels._util.direct,
promise a tensor and are not checked, nor are torch's out= calls of into.py). A long
program is cut into functions of at most `CHUNK` launches (values crossing a cut go through
`env`), which keeps compile time linear.
The source is registered with linecache, so tracebacks through it show the steps.
"""
from __future__ import annotations

import itertools
import linecache
import weakref
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ..plan.plan import LAUNCH, RECORD, Plan

CHUNK = 1000              # most launches per generated function
_SERIAL = itertools.count()

# What an output value must be, by its plan value: TENSOR a torch.Tensor; STRING a string
# tensor (a numpy object array); UNKNOWN (no dtype inferred) either; SEQUENCE a list; ANY
# unchecked (an optional: None, a tensor or a sequence).
ANY, TENSOR, STRING, UNKNOWN, SEQUENCE = 0, 1, 2, 3, 4
_WANTED = {TENSOR: "a torch.Tensor", STRING: "a numpy object array (a string tensor)",
           UNKNOWN: "a torch.Tensor (or a numpy object array for strings)",
           SEQUENCE: "a list (a sequence value)"}


class Aborted(Exception):
    """Raised by a wait when another thread of the run failed; ends the program quietly."""


class KernelResultError(TypeError):
    """A kernel returned something other than a list of its node's outputs."""


def value_kind(kind: str, dtype: str | None) -> int:
    """What a kernel must return for a value of this kind and dtype (ANY, TENSOR, ...)."""
    if kind == "sequence":
        return SEQUENCE
    if kind != "tensor":
        return ANY
    if dtype is None:
        return UNKNOWN
    return STRING if dtype in ("object", "string") else TENSOR


def output_kinds(plan: Plan) -> list[int]:
    """Per plan value, what its producer's kernel must return for it (value_kind). A value
    that nothing reads and that is no model output (an output the model leaves unused) is
    not checked: kernels may return None there."""
    read = {i for n in plan.nodes for i in n.inputs}
    return [value_kind(v.kind, v.dtype) if v.index in read or v.is_output else ANY
            for v in plan.values]


def results_error(r: Any, n: int) -> KernelResultError | None:
    """None if `r` may stand for a kernel's n results (a list or tuple of n), else the error."""
    if isinstance(r, (list, tuple)) and len(r) == n:
        return None
    if isinstance(r, (list, tuple)):
        got = f"a {type(r).__name__} of {len(r)} result{'s' if len(r) != 1 else ''}"
    else:
        got = f"a {_type_name(r)}"
    return KernelResultError(f"its kernel returned {got}, expected a list of {n} output"
                             f"{'s' if n != 1 else ''}")


def element_error(x: Any, want: int, name: str) -> KernelResultError | None:
    """None if `x` is what a value of kind `want` (value_kind) may hold, else the error."""
    tensor = isinstance(x, torch.Tensor)
    strings = isinstance(x, np.ndarray) and x.dtype == object
    ok = {ANY: True, TENSOR: tensor, STRING: strings or tensor, UNKNOWN: tensor or strings,
          SEQUENCE: isinstance(x, list)}[want]
    if ok:
        return None
    return KernelResultError(f"its kernel returned a {_type_name(x)} for output {name!r}, "
                             f"expected {_WANTED[want]}")


def result_checkers(plan: Plan, kinds: Sequence[int]):
    """The two slow-path helpers generated code calls: fix(ni, r) for a result that is not
    a list of the node's length, check(ni, position, x) for an element of the wrong class.
    Both raise KernelResultError saying what the kernel returned (the caller names the
    node); fix accepts a tuple of the right length, check a subclass of torch.Tensor."""
    def fix(ni: int, r: Any) -> list:
        err = results_error(r, len(plan.nodes[ni].outputs))
        if err is not None:
            raise err
        return list(r)

    def check(ni: int, pos: int, x: Any) -> None:
        vi = plan.nodes[ni].outputs[pos]
        err = element_error(x, kinds[vi], plan.values[vi].name)
        if err is not None:
            raise err
    return fix, check


def _type_name(x: Any) -> str:
    t = type(x)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__name__}"


def local_values(plan: Plan, programs: Sequence[Sequence[tuple[int, int]]]) -> list:
    """Per plan value, the (program, chunk) whose function alone produces, reads and
    releases it, or None: the value goes through env. Model inputs, outputs and constants
    never are local. A launch's chunk is the number of launches before it // CHUNK."""
    where = {}
    for p, steps in enumerate(programs):
        launches = 0
        for kind, a in steps:
            if kind == LAUNCH:
                where[a] = (p, launches // CHUNK)
                launches += 1
    owner: list = [None] * len(plan.values)
    shared = [False] * len(plan.values)
    for n in plan.nodes:
        at = where.get(n.index, (-1, -1))
        for vi in (*n.outputs, *(i for i in n.inputs if i >= 0), *n.free_after):
            if owner[vi] is None:
                owner[vi] = at
            elif owner[vi] != at:
                shared[vi] = True
    for v in plan.values:
        if shared[v.index] or v.is_output or v.is_input or v.is_const or v.producer < 0:
            owner[v.index] = None
    return owner


def compile_program(plan: Plan, steps: Sequence[tuple[int, int]], program: int, stream: int,
                    kernels: Sequence[Callable], owner: Sequence[int], kinds: Sequence[int],
                    helpers: tuple, *, hooked: bool = False, abortable: bool = True,
                    into: Sequence | None = None) -> Callable[[list, Any], bool]:
    """One program as a function run(env, job) -> True if it stopped early (a failure,
    reported through job.fail(node, stream, err), or an abort), False when it ran to the end.

    `steps`: (kind, arg) pairs; `program`: its index in the list local_values was given;
    `owner`: local_values' table (a chunk's locals are Python variables); `stream`: the id job.fail and the hooks are given (-1: each node's own
    plan stream, for a program that merges streams); `hooked`: call job.hooks around every
    launch, record and wait (the executors' hooks protocol, base.py); `abortable`: test
    job.aborted before each launch (a program that runs alone has nobody to stop it);
    `into`: per plan node, (fn, view) to call fn(*inputs, out=view) instead of its kernel,
    or None (into.Into.calls).
    """
    fix, check = helpers
    glb = {"Tensor": torch.Tensor, "Aborted": Aborted, "fix": fix, "check": check}
    chunks, body, launches = [], [], 0
    for kind, a in steps:
        if kind == LAUNCH and launches and launches % CHUNK == 0:
            chunks.append(body)
            body = []
        here = (program, launches // CHUNK)
        call = into[a] if into is not None and kind == LAUNCH else None
        body.extend(_step_lines(plan, kind, a, here, stream, owner, kinds, glb, kernels,
                                hooked, abortable, call))
        launches += kind == LAUNCH
    chunks.append(body)
    label = f"{plan.graph_name}_p{program}{'_hooked' if hooked else ''}"
    funcs = [_compile_chunk(label, c, i, stream, hooked, glb) for i, c in enumerate(chunks)]
    if len(funcs) == 1:
        return funcs[0]

    def run(env: list, job: Any) -> bool:
        for f in funcs:
            if f(env, job):
                return True
        return False
    return run


def _ref(vi: int, here: tuple[int, int], owner: Sequence) -> str:
    """How the code of chunk `here` names value vi: a local, or its slot in env."""
    return f"v{vi}" if owner[vi] == here else f"env[{vi}]"


def _step_lines(plan: Plan, kind: int, a: int, here: tuple, stream: int, owner, kinds, glb,
                kernels, hooked: bool, abortable: bool, into_call=None) -> list[str]:
    if kind == RECORD:
        return [f"job.record({a})"] + ([f"on_record({a}, {stream})"] if hooked else [])
    if kind != LAUNCH:
        return [f"if not flags[{a}]: job.wait({a})"] + ([f"on_wait({a}, {stream})"] if hooked else [])
    n = plan.nodes[a]
    ref = [_ref(vi, here, owner) for vi in n.outputs]
    lines = ["if job.aborted: return True"] if abortable else []
    if into_call is not None:         # (fn, view): torch's out= into a planned buffer
        glb[f"o{a}"], glb[f"b{a}"] = into_call
        args = ", ".join(_ref(i, here, owner) for i in n.inputs)
        lines += [f"ni = {a}"] + _wrap(a, n, stream, hooked, f"{ref[0]} = o{a}({args}, out=b{a})")
        return lines + [f"{_ref(vi, here, owner)} = None" for vi in n.free_after]
    lines += [f"ni = {a}"] + _call_lines(n, kernels[a], ref, here, owner, glb, hooked, stream)
    for pos, vi in enumerate(n.outputs):
        if kinds[vi] == TENSOR and f"d{a}" in glb:
            continue                 # a direct kernel returns a tensor (kernels._util.direct)
        if kinds[vi] == TENSOR:      # (an expression, not an `if`: cheaper to compile)
            lines.append(f"{ref[pos]}.__class__ is Tensor or check({a}, {pos}, {ref[pos]})")
        elif kinds[vi] != ANY:
            lines.append(f"check({a}, {pos}, {ref[pos]})")
    return lines + [f"{_ref(vi, here, owner)} = None" for vi in n.free_after]


def _call_lines(n, kernel, ref: list[str], here: tuple, owner, glb, hooked: bool,
                stream: int) -> list[str]:
    """The kernel call of node n, its results stored into `ref` (checked for count)."""
    a = n.index
    args = ", ".join("None" if i < 0 else _ref(i, here, owner) for i in n.inputs)
    wrap = lambda call: _wrap(a, n, stream, hooked, call)   # noqa: E731
    impl = getattr(kernel, "direct", None)
    if impl is not None and len(n.outputs) == 1 and all(i >= 0 for i in n.inputs):
        glb[f"d{a}"] = impl          # kernel(xs) == [impl(*xs)] (kernels._util.direct)
        return wrap(f"{ref[0]} = d{a}({args})")
    glb[f"k{a}"] = kernel
    return wrap(f"r = k{a}([{args}])") + [
        f"if r.__class__ is not list or len(r) != {len(n.outputs)}: r = fix({a}, r)",
        *(f"{dst} = r[{pos}]" for pos, dst in enumerate(ref)), "r = None"]   # r holds no value


def _wrap(a: int, n, stream: int, hooked: bool, call: str) -> list[str]:
    """A launch's call line, between the hooks' before and after calls if `hooked`."""
    if not hooked:
        return [call]
    s = n.stream if stream < 0 else stream
    return [f"before({a}, {s})", call, f"after({a}, {s})"]


def _compile_chunk(label: str, body: list[str], index: int, stream: int, hooked: bool,
                   glb: dict) -> Callable[[list, Any], bool]:
    name = f"pyge_{_ident(label)}_c{index}"
    head = [f"def {name}(env, job):", "    flags = job.flags", "    ni = -1"]
    if hooked:
        head += ["    hooks = job.hooks", "    before, after = hooks.before, hooks.after",
                 "    on_record = getattr(hooks, 'record', None) or (lambda e, s: None)",
                 "    on_wait = getattr(hooks, 'wait', None) or (lambda e, s: None)"]
    src = "\n".join(head + ["    try:"] + [f"        {ln}" for ln in body or ["pass"]]
                    + ["    except Aborted:", "        return True",
                       "    except KeyboardInterrupt as err:",      # Ctrl-C: leave at once
                       f"        job.fail(ni, {stream}, err)", "        raise",
                       "    except BaseException as err:",
                       f"        job.fail(ni, {stream}, err)", "        return True",
                       "    return False", ""])
    filename = f"<pyge generated {name} #{next(_SERIAL)}>"
    exec(compile(src, filename, "exec"), glb)          # noqa: S102 - our own generated source
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    fn = glb[name]
    weakref.finalize(fn, linecache.cache.pop, filename, None)    # no source kept past its code
    return fn


def _ident(label: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in label)[:40]
