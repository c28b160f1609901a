//! [`Remedy`]: the operator actions library messages advise, named in words every caller can
//! follow.
//!
//! A library error's message says what was wrong and what to do in neutral words: an action is
//! named by its [`Remedy::name`] (`refs recover`, `refs repair`, `cleanup`, ...), never by one
//! caller's spelling of it (a CLI command with its flags, a Python method, a Rust function). Each
//! caller adds its own spelling: [`Remedy::named_in`] finds the actions a message names, and the
//! CLI prints its command for each, the Python package a note with its method.

/// An action a library message may advise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Remedy {
    /// Create a lake at the root (with its GC policy floor).
    InitLake,
    /// Journal the versions interrupted writers committed, and resolve their write intents.
    RefsRecover,
    /// Rebuild a version's journal entry from the table (only when no writer is running).
    RefsRepair,
    /// Bind journal entries written by earlier builds to the Lance versions they describe.
    RefsBind,
    /// Compare the journal with full scans of the tables.
    RefsVerify,
    /// Remove a table's Lance versions (and files no version needs) older than a duration.
    Cleanup,
    /// Create a branch through lake (so that its versions are journaled).
    BranchCreate,
    /// Delete a branch through lake.
    BranchDelete,
    /// Unset a table setting that lets Lance remove versions by itself.
    ConfigUnset,
    /// Copy an object to a fresh key (the same bytes, a new ULID) and reference the copy.
    CopyFresh,
    /// Allow a GC horizon below the lake's policy floor.
    AllowBelowPolicy,
    /// Raise the bound on the difference between this host's clock and the store's.
    MaxClockSkew,
}

impl Remedy {
    /// Every remedy.
    pub const ALL: [Remedy; 12] = [
        Remedy::InitLake,
        Remedy::RefsRecover,
        Remedy::RefsRepair,
        Remedy::RefsBind,
        Remedy::RefsVerify,
        Remedy::Cleanup,
        Remedy::BranchCreate,
        Remedy::BranchDelete,
        Remedy::ConfigUnset,
        Remedy::CopyFresh,
        Remedy::AllowBelowPolicy,
        Remedy::MaxClockSkew,
    ];

    /// The action's neutral name, as library messages write it (in backquotes).
    pub const fn name(self) -> &'static str {
        match self {
            Remedy::InitLake => "init",
            Remedy::RefsRecover => "refs recover",
            Remedy::RefsRepair => "refs repair",
            Remedy::RefsBind => "refs bind",
            Remedy::RefsVerify => "refs verify",
            Remedy::Cleanup => "cleanup",
            Remedy::BranchCreate => "branch create",
            Remedy::BranchDelete => "branch delete",
            Remedy::ConfigUnset => "config unset",
            Remedy::CopyFresh => "copy fresh",
            Remedy::AllowBelowPolicy => "allow below policy",
            Remedy::MaxClockSkew => "max clock skew",
        }
    }

    /// The actions `message` names (each as `` `name` ``), in [`Remedy::ALL`]'s order.
    pub fn named_in(message: &str) -> Vec<Remedy> {
        Remedy::ALL.into_iter().filter(|r| message.contains(&format!("`{}`", r.name()))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_are_found_by_their_quoted_names() {
        let message = "version 3 has no journal entry: run `refs recover`; if no writer runs, `refs repair` it";
        assert_eq!(Remedy::named_in(message), [Remedy::RefsRecover, Remedy::RefsRepair]);
        assert!(Remedy::named_in("a cleanup of nothing").is_empty(), "only quoted names count");
    }
}
