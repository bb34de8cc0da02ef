//! The launch log: one line per kernel launch, appended to the file `HIP_STANDIN_LAUNCH_LOG`
//! names (nothing when unset), for tests to read what ran:
//!
//! `launch kernel=<name> device=<arch> grid=<x>,<y>,<z> block=<x>,<y>,<z> lds=<dynamic bytes> image=<code object address>`
use std::io::Write;

pub const LOG_VAR: &str = "HIP_STANDIN_LAUNCH_LOG";

pub struct Launch<'a> {
    pub kernel: &'a str,
    pub arch: &'a str,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub dynamic_lds: u32,
    pub image: usize,
}

pub fn record(launch: &Launch) {
    let Some(path) = std::env::var_os(LOG_VAR) else { return };
    let [gx, gy, gz] = launch.grid;
    let [bx, by, bz] = launch.block;
    let line = format!(
        "launch kernel={} device={} grid={gx},{gy},{gz} block={bx},{by},{bz} lds={} image={:#x}\n",
        launch.kernel, launch.arch, launch.dynamic_lds, launch.image
    );
    let written = std::fs::OpenOptions::new().create(true).append(true).open(&path).and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(error) = written {
        eprintln!("hip-standin: cannot append to {LOG_VAR}={}: {error}", path.to_string_lossy());
    }
}
