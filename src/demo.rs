//! `kiln demo`: a small in-process network exported, compiled, run and checked.
