//! The `pincer` command-line interface.
fn main() {}
