# kiln's long-lived IREE runner: loads the module and the parameter archive
# once with IREE's own Python runtime (iree-base-runtime), then answers one
# line of SEQ token ids on stdin with one line of SEQ predicted ids on stdout.
import sys

import numpy as np
import iree.runtime as rt

vmfb, params, scope, function, device, seq, groups = sys.argv[1:8]
seq = int(seq)
if groups:
    rt.flags.parse_flags("--task_topology_group_count=" + groups)
config = rt.Config(device)
index = rt.ParameterIndex()
index.load(params)
provider = index.create_provider(scope=scope)
param_module = rt.create_io_parameters_module(config.vm_instance, provider)
module = rt.VmModule.mmap(config.vm_instance, vmfb)
modules = rt.load_vm_modules(param_module, module, config=config)
fn = getattr(modules[-1], function)
print("ready", flush=True)
for line in sys.stdin:
    ids = np.array([int(x) for x in line.split()], dtype=np.int32).reshape(1, seq)
    out = np.asarray(fn(ids).to_host()).reshape(-1)
    print(" ".join(str(int(x)) for x in out), flush=True)
