//! Build script entry. The default build compiles nothing native; the `rocm` feature builds the
//! Composable Kernel instances and the C++ shim (see the modules of this folder).
fn main() {
    println!("cargo:rerun-if-changed=build");
}
