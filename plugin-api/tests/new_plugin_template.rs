//! The engine `cargo xtask new-plugin` writes, compiled and tested here as it is (the template
//! uses the id `new-engine`, which the command replaces): proof that a new author's first engine
//! builds against this API, passes its own tests, and names no FFI type.

#[path = "../../xtask/src/templates/engine.rs"]
mod engine;

/// What an author should never have to name.
const FFI: [&str; 9] = [
    "RStr",
    "RString",
    "RSlice",
    "RVec",
    "ROption",
    "RResult",
    "RBox",
    "abi_stable",
    "abi::",
];

#[test]
fn the_template_names_no_ffi_type() {
    let source = include_str!("../../xtask/src/templates/engine.rs");
    for ffi in FFI {
        assert!(!source.contains(ffi), "the template names {ffi}");
    }
    let readme = include_str!("../../README.md");
    let example = readme
        .split("```rust")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the README has a Rust example");
    for ffi in FFI {
        assert!(!example.contains(ffi), "the README's example names {ffi}");
    }
    assert!(
        example.contains("export_engine!"),
        "the README's example exports its engine"
    );
}
