//! Export of a checkpoint to `<name>-gen.mlir`, `<name>.safetensors`, `<name>.irpa`.
