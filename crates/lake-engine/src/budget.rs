//! The memory budget of GC and repair, and the one place its split is decided. Both sides use
//! it: the engine (`lake-lance`) for its bounded replay of a table's journal, GC (`lake-gc`) for
//! its own sorted runs, so it lives here, below both.

/// Default memory budget of planning, in bytes (256 MiB): the sorted-run buffers of the live
/// set and of the table being replayed share it ([`share`]).
pub const DEFAULT_MEMORY_BUDGET: usize = 256 * 1024 * 1024;

/// How one memory budget of GC (`--memory-budget-mib`, in bytes) is shared: half for the
/// engine's replay of the table being read (its journal events), half for GC's own sorted runs
/// (the live keys, then the candidates and the keys apply checks). Returns `(engine, gc)` in
/// bytes.
pub fn share(total: usize) -> (usize, usize) {
    (total / 2, total / 2)
}
