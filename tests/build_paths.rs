//! The build script finds the crate's files (kernels/, build/*.py, csrc/) through the
//! `CARGO_MANIFEST_DIR` cargo sets when it runs the script, never through the one compiled into
//! it: cargo shares one compiled build script between checkouts of this crate that share a
//! target directory, and a compiled-in path sent a build of one checkout to the other's
//! kernels (seen: a benchmark built here embedded a second worktree's older kernels).

#[test]
fn the_build_script_reads_its_directory_at_run_time() {
    let build = concat!(env!("CARGO_MANIFEST_DIR"), "/build");
    let mut offenders = Vec::new();
    for entry in std::fs::read_dir(build).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                if code.contains(concat!("env!(", "\"CARGO_MANIFEST_DIR\")")) {
                    offenders.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
                }
            }
        }
    }
    assert!(offenders.is_empty(), "compile-time manifest paths in the build script:\n{}", offenders.join("\n"));
}
