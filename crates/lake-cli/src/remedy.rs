//! The CLI's spelling of the remedies library messages advise ([`Remedy`]): each message names
//! an action neutrally (`` `refs recover` ``), and the CLI adds the command that does it.

use lake::common::remedy::Remedy;

/// The command (or flag) that does `remedy`, with placeholders in capitals.
pub(crate) const fn spelling(remedy: Remedy) -> &'static str {
    match remedy {
        Remedy::InitLake => "lake init ROOT --min-age DUR",
        Remedy::RefsRecover => "lake refs recover ROOT [--table TABLE]",
        Remedy::RefsRepair => {
            "lake refs repair ROOT --table TABLE --version VERSION (only once no writer of that table is running: a repair races a live writer)"
        }
        Remedy::RefsBind => "lake refs bind ROOT --table TABLE",
        Remedy::RefsVerify => "lake refs verify ROOT",
        Remedy::Cleanup => "lake cleanup ROOT --table TABLE --older-than DUR",
        Remedy::BranchCreate => "lake branch create ROOT --table TABLE --name BRANCH --from VERSION",
        Remedy::BranchDelete => "lake branch delete ROOT --table TABLE --name BRANCH",
        Remedy::ConfigUnset => "lake config ROOT --table TABLE --unset KEY",
        Remedy::CopyFresh => "no lake command copies an object; upload the file again (a fresh key) and reference that",
        Remedy::AllowBelowPolicy => "lake gc ... --allow-below-policy",
        Remedy::MaxClockSkew => "lake gc ... --max-clock-skew DUR",
    }
}

/// The commands for the remedies `message` names, one a line, each as `with lake: COMMAND`.
pub(crate) fn hints(message: &str) -> Vec<String> {
    Remedy::named_in(message).into_iter().map(|r| format!("with lake: {}", spelling(r))).collect()
}

/// `message` followed by its hints, each on a line of its own indented by `indent`.
pub(crate) fn with_hints(message: &str, indent: &str) -> String {
    let mut text = message.to_string();
    for hint in hints(message) {
        text.push('\n');
        text.push_str(indent);
        text.push_str(&hint);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_remedy_has_a_command() {
        for remedy in Remedy::ALL {
            assert!(spelling(remedy).starts_with("lake ") || remedy == Remedy::CopyFresh, "{remedy:?}");
        }
        let text = with_hints("run `refs recover`, then `refs repair` it", "  ");
        assert_eq!(
            text,
            "run `refs recover`, then `refs repair` it\n  with lake: lake refs recover ROOT [--table TABLE]\n  with lake: lake refs repair ROOT --table TABLE --version VERSION (only once no writer of that table is running: a repair races a live writer)"
        );
    }
}
