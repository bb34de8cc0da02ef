//! Compiles csrc/abi.c against AMD's HIP header: `HIP_STANDIN_INCLUDE` names the include
//! directory that holds `hip/hip_runtime_api.h` (scripts/hip_standin.py passes the ROCm
//! chroot's).
fn main() {
    println!("cargo:rerun-if-env-changed=HIP_STANDIN_INCLUDE");
    println!("cargo:rerun-if-changed=csrc/abi.c");
    println!("cargo:rerun-if-changed=csrc/abi.h");
    let include = std::env::var("HIP_STANDIN_INCLUDE")
        .expect("HIP_STANDIN_INCLUDE: the include directory holding hip/hip_runtime_api.h (HIP 6.4's)");
    cc::Build::new()
        .file("csrc/abi.c")
        .define("__HIP_PLATFORM_AMD__", None)
        // After the system's own directories: only hip/ is taken from there.
        .flag(format!("-idirafter{include}"))
        .warnings(true)
        .compile("hip_standin_abi");
}
