# kiln's long-lived IREE runner: loads the module and the parameter archive
# once with IREE's own Python runtime (iree-base-runtime), then answers one
# line on stdin with one line on stdout.
#
# Arguments: VMFB PARAMS SPEC; SPEC is one JSON object (session.rs builds it
# in runner_args): packed (the packed archive of `kiln compile --pack`, or
# null), map_params (map the archive, not read it), scope, device, task_groups (null: IREE's default), seq, and
# "function" (redecode) or "kv": {functions: [[prefill, decode], ...] (one
# pair per attention span, the pair over all N positions last), caches:
# [{shape, dtype}]}.
#
# Redecode mode: a line of SEQ token ids -> a line of SEQ predicted ids.
# KV-cache mode (SEQ is the prompt bucket P; F indexes "functions"):
#   "r"                                   -> ok        (zeroed caches: a new conversation)
#   "p F START LENGTH id_0 ... id_{P-1}"  -> prediction (prefill of a chunk at START)
#   "d F TOKEN POSITION"                  -> prediction (decode on the kept K, V)
# A prediction is the next id, then, from a module exported with
# `--sampling topk=K`, the K top ids and the K top logits (each as Python's
# repr of the float: it reads back exactly).
# The caches stay on the device between calls: the results of one call are
# passed as arguments to the next (and written in place), never copied to
# the host.
import json
import os
import sys

# The process's threads run under SCHED_BATCH (Linux): set before numpy
# and IREE's runtime start theirs, which inherit it. IREE 3.13's wait on a
# call's fence ends in a spin until the worker that signalled it has left
# its callback; under the default policy the woken caller preempts that
# worker and spins, up to a scheduler tick: 1.6 ms of every SmolLM2 decode
# call. SCHED_BATCH turns wake-up preemption off (spec/iree.md, "The
# session's scheduling policy").
if hasattr(os, "SCHED_BATCH"):
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except OSError:
        pass

import numpy as np  # noqa: E402 (after the policy, above)
import iree.runtime as rt  # noqa: E402

vmfb, params, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
if spec["task_groups"] is not None:
    rt.flags.parse_flags("--task_topology_group_count=" + str(spec["task_groups"]))
config = rt.Config(spec["device"])
index = rt.ParameterIndex()
# A file handle, not the default mapping: with a mapped (or preloaded)
# archive, iree-base-runtime 3.13 ignores the offset of a parameter slice
# (`#flow.parameter.named<..., {offset = ...}>`, how kiln declares the row
# chunks of a large embedding) and every chunk reads the entry's first
# bytes. iree-run-module reads slices right; so does this mode, at the same
# decode speed and memory (spec/vulkan-limits.md).
# With `map_params` (a CPU module, or one packed at compile time, that reads
# no slice past an entry's start: session.rs checks), the archive is mapped
# instead: only the pages the module reads are resident.
if spec.get("map_params"):
    index.load(params)
else:
    index.load(params, mode="file_async")
providers = [index.create_provider(scope=spec["scope"])]
if spec.get("packed"):
    # A module compiled with `kiln compile --pack` reads its packed weights
    # from a second archive, scope "packed". Mapped (the default mode), not
    # read: kiln stores each packed tensor once and lets the prefill's and
    # the decode's entries share the bytes, which only a mapping holds once.
    # The archive has no slices (the mapped mode's offset bug above).
    packed = rt.ParameterIndex()
    packed.load(spec["packed"])
    providers.append(packed.create_provider(scope="packed"))
param_module = rt.create_io_parameters_module(config.vm_instance, *providers)
module = rt.VmModule.mmap(config.vm_instance, vmfb)
modules = rt.load_vm_modules(param_module, module, config=config)
kv = spec.get("kv")
if kv is not None:
    functions = [
        (getattr(modules[-1], prefill), getattr(modules[-1], decode))
        for prefill, decode in kv["functions"]
    ]

    def cache_dtype(name):
        if name == "bf16":
            import ml_dtypes

            return ml_dtypes.bfloat16
        # i32: a Vulkan module's bf16 caches, two values per word.
        return {"i32": np.int32}.get(name, np.float32)

    cache_types = [(tuple(c["shape"]), cache_dtype(c["dtype"])) for c in kv["caches"]]
else:
    fn = getattr(modules[-1], spec["function"])


def to_numpy(arr):
    """The result's values on the host.

    `DeviceArray.to_host()` in iree-base-runtime 3.13 imports a fresh numpy
    array as a device buffer when the allocator says it can; on Vulkan
    (lavapipe) that import needs 4096-byte-aligned memory, which numpy does
    not give: `INVALID_ARGUMENT; host allocation import pointer does not
    satisfy Vulkan minImportedHostPointerAlignment 4096`. Then copy through
    a mappable staging buffer instead, as `to_host()` itself does for
    allocators that cannot import.
    """
    try:
        return np.asarray(arr.to_host())
    except ValueError:
        view, device = arr._buffer_view, arr._device
        source = view.get_buffer()
        staging = device.allocator.allocate_buffer(
            memory_type=int(rt.MemoryType.HOST_LOCAL | rt.MemoryType.DEVICE_VISIBLE),
            allowed_usage=int(rt.BufferUsage.TRANSFER_TARGET | rt.BufferUsage.MAPPING_SCOPED),
            allocation_size=source.byte_length(),
        )
        sem = device.create_semaphore(0)
        device.queue_copy(
            source,
            staging,
            wait_semaphores=rt.HalFence.create_at(sem, 0),
            signal_semaphores=rt.HalFence.create_at(sem, 1),
        )
        rt.HalFence.create_at(sem, 1).wait()
        return np.array(staging.map().asarray(view.shape, arr.dtype))


def serve_redecode():
    for line in sys.stdin:
        ids = np.array([int(x) for x in line.split()], dtype=np.int32).reshape(1, spec["seq"])
        out = to_numpy(fn(ids)).reshape(-1)
        print(" ".join(str(int(x)) for x in out), flush=True)


def serve_kv():
    caches = None
    for line in sys.stdin:
        words = line.split()
        if words[0] == "r":
            caches = tuple(np.zeros(shape, dtype=dtype) for shape, dtype in cache_types)
            print("ok", flush=True)
            continue
        if caches is None:
            raise SystemExit("prefill or decode before a reset")
        if words[0] == "p":
            prefill_fn = functions[int(words[1])][0]
            start = np.array(int(words[2]), dtype=np.int32)
            length = np.array(int(words[3]), dtype=np.int32)
            ids = np.array([int(x) for x in words[4:]], dtype=np.int32).reshape(1, spec["seq"])
            nxt, *rest = prefill_fn(ids, start, length, *caches)
        elif words[0] == "d":
            decode_fn = functions[int(words[1])][1]
            token = np.array([int(words[2])], dtype=np.int32)
            position = np.array(int(words[3]), dtype=np.int32)
            nxt, *rest = decode_fn(token, position, *caches)
        else:
            raise SystemExit("unknown command " + words[0])
        caches, top = tuple(rest[: len(cache_types)]), rest[len(cache_types) :]
        words = [str(int(to_numpy(nxt).reshape(-1)[0]))]
        if top:
            values, ids = (to_numpy(t).reshape(-1) for t in top)
            words += [str(int(i)) for i in ids] + [repr(float(x)) for x in values]
        print(" ".join(words), flush=True)


print("ready", flush=True)
serve_kv() if kv is not None else serve_redecode()
