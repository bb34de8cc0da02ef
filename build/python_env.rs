//! The Python interpreter that runs kernels/aot.py: one with the pinned `triton` wheel, either
//! the user's (FLASH_ATTN_ROCM_PYTHON) or a venv the build creates once under the cache root
//! and installs the wheel into from pip's configured index.
use crate::cache_key::{cache_root, offline, ENV_OFFLINE};
use crate::BuildResult;
use std::env;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{self, Command, Stdio};
use std::time::Instant;

/// The kernels are written for, and the manifest format comes from, this exact version.
pub const TRITON_VERSION: &str = "3.6.0";
pub const ENV_PYTHON: &str = "FLASH_ATTN_ROCM_PYTHON";

/// An interpreter whose `import triton` is [`TRITON_VERSION`].
pub fn triton_python() -> BuildResult<PathBuf> {
    for var in [ENV_PYTHON, "PATH"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    if let Some(python) = env::var_os(ENV_PYTHON).map(PathBuf::from) {
        let shown = python.display();
        return match triton_version(&python) {
            Ok(v) if v == TRITON_VERSION => Ok(python),
            Ok(v) => Err(format!(
                "{ENV_PYTHON}={shown} has triton {v}, but the kernels are pinned to triton=={TRITON_VERSION}: \
                 install that version there (`{shown} -m pip install triton=={TRITON_VERSION}`), or unset \
                 {ENV_PYTHON} and the build installs it into its own venv under the cache root ({ENV_PYTHON} \
                 also runs CK's code generator, which needs no triton)."
            )),
            Err(e) => Err(format!(
                "{ENV_PYTHON}={shown} cannot import triton: {e}\nInstall it there (`{shown} -m pip install \
                 triton=={TRITON_VERSION}`), or unset {ENV_PYTHON} and the build installs it into its own venv \
                 ({ENV_PYTHON} also runs CK's code generator, which needs no triton)."
            )),
        };
    }
    let venv = cache_root()?.join(format!("triton-{TRITON_VERSION}"));
    if is_ready(&venv) {
        return Ok(venv_python(&venv));
    }
    if offline() {
        let dir = venv.display();
        return Err(format!(
            "{ENV_OFFLINE} is set and there is no triton=={TRITON_VERSION} venv at {dir}. Create it once \
             where pip can reach its index:\n    python3 -m venv {dir} && {dir}/bin/python -m pip install \
             triton=={TRITON_VERSION}\nor set {ENV_PYTHON} to a Python that has triton=={TRITON_VERSION}."
        ));
    }
    crate::progress::step(&format!(
        "creating {} and installing triton=={TRITON_VERSION} from pip's index (a ~190 MB wheel)",
        venv.display()
    ));
    create_venv(&venv)?;
    crate::progress::step("triton venv ready");
    Ok(venv_python(&venv))
}

fn venv_python(venv: &Path) -> PathBuf {
    venv.join(if cfg!(windows) { "Scripts/python.exe" } else { "bin/python" })
}

fn is_ready(venv: &Path) -> bool {
    venv_python(venv).exists() && triton_version(&venv_python(venv)).is_ok_and(|v| v == TRITON_VERSION)
}

/// `triton.__version__` as `python` imports it.
fn triton_version(python: &Path) -> BuildResult<String> {
    let out = Command::new(python)
        .args(["-c", "import triton; print(triton.__version__)"])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("failed").trim().to_string());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `python3 -m venv` + `pip install triton==VERSION` into a staging directory, then renamed into
/// place, so that a failed or concurrent install never leaves a half-made venv at `venv`. (The
/// venv's own scripts keep the staging path in their shebangs; the build runs only its python.)
fn create_venv(venv: &Path) -> BuildResult<()> {
    let parent = venv.parent().ok_or("the venv has no parent directory")?;
    fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    let staging = parent.join(format!("triton-{TRITON_VERSION}.tmp-{}", process::id()));
    let log = parent.join(format!("triton-{TRITON_VERSION}-install.log"));
    let _ = fs::remove_file(&log);
    remove_dir(&staging)?;
    let started = Instant::now();
    run_logged(Command::new("python3").args(["-m", "venv"]).arg(&staging), &log).map_err(|e| {
        format!(
            "creating a venv for triton failed: {e}\nNeeds python3 with venv (Debian/Ubuntu: apt install \
             python3-venv), or set {ENV_PYTHON} to a Python that has triton=={TRITON_VERSION}."
        )
    })?;
    let mut pip = Command::new(venv_python(&staging));
    pip.args(["-m", "pip", "install", "--disable-pip-version-check", "--no-input"]);
    pip.arg(format!("triton=={TRITON_VERSION}"));
    if let Err(e) = run_logged(&mut pip, &log) {
        remove_dir(&staging)?;
        return Err(format!(
            "installing triton=={TRITON_VERSION} (from pip's configured index) failed: {e}\nOffline? Set \
             {ENV_PYTHON} to a Python that has triton=={TRITON_VERSION}."
        ));
    }
    if !is_ready(venv) {
        remove_dir(venv)?;
    }
    if let Err(e) = fs::rename(&staging, venv) {
        // Another build may have won the race; its venv is as good as ours.
        remove_dir(&staging)?;
        if !is_ready(venv) {
            return Err(format!("cannot move {} to {}: {e}", staging.display(), venv.display()));
        }
    }
    match triton_version(&venv_python(venv)) {
        Ok(v) if v == TRITON_VERSION => {}
        other => {
            return Err(format!("{} has no working triton=={TRITON_VERSION} after install: {other:?}", venv.display()))
        }
    }
    println!(
        "cargo:warning=flash-attn-rocm: installed triton=={TRITON_VERSION} into {} in {:.0} s (once; log {})",
        venv.display(),
        started.elapsed().as_secs_f64(),
        log.display()
    );
    Ok(())
}

/// Runs `command` with stdout and stderr appended to `log`; a failure quotes the log's tail.
pub fn run_logged(command: &mut Command, log: &Path) -> BuildResult<()> {
    let open = || {
        File::options().create(true).append(true).open(log).map_err(|e| format!("cannot open {}: {e}", log.display()))
    };
    let status = command
        .stdin(Stdio::null())
        .stdout(open()?)
        .stderr(open()?)
        .status()
        .map_err(|e| format!("cannot run {command:?}: {e}"))?;
    if status.success() {
        return Ok(());
    }
    let text = fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(40)..].join("\n");
    Err(format!("{command:?} failed ({status}); the end of {}:\n{tail}", log.display()))
}

pub fn remove_dir(dir: &Path) -> BuildResult<()> {
    match fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(format!("cannot remove {}: {e}", dir.display())),
        _ => Ok(()),
    }
}
