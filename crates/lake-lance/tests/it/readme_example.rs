//! The README's "Writing from Rust" example is the file `cargo test` runs, character for character.

use std::path::Path;

const FILE: &str = "crates/lake-lance/examples/write_from_rust.rs";

#[test]
fn the_readme_example_is_the_example_file() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(workspace.join("README.md")).unwrap();
    let file = std::fs::read_to_string(workspace.join(FILE)).unwrap();
    // The block is fenced as Rust between `<!-- begin FILE...-->` and `<!-- end FILE -->`.
    let begin = format!("<!-- begin {FILE}");
    let start = readme.find(&begin).unwrap_or_else(|| panic!("README.md has no `{begin}` marker"));
    let after_marker = &readme[start..];
    let fence = "-->\n```rust\n";
    let open = after_marker.find(fence).expect("the begin marker is followed by a ```rust fence") + fence.len();
    let end = format!("```\n<!-- end {FILE} -->");
    let close = after_marker.find(&end).unwrap_or_else(|| panic!("README.md has no `{end}` after the begin marker"));
    let block = &after_marker[open..close];
    if block != file {
        let line = block
            .lines()
            .zip(file.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(block.lines().count().min(file.lines().count()));
        panic!(
            "README.md's copy of {FILE} differs from the file (first at line {} of the file); paste the file between the markers",
            line + 1
        );
    }
}
