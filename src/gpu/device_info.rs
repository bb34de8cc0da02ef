//! What the launchers need to know of a device (its arch, compute units and launch limits),
//! queried from the driver once per device and cached for the process.
use super::{Api, Driver};
use crate::device::DeviceLimits;
use candle::Result;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// What the plan needs to know of a device, queried once per device.
#[derive(Debug, Clone)]
pub struct DeviceInfo {
    /// The code-object target: `gfx1100`, `gfx942`, ..., `sm_90`.
    pub arch: String,
    /// Compute units (AMD) or SMs (NVIDIA).
    pub units: usize,
    /// What one block may use: the code objects selected must fit it.
    pub limits: DeviceLimits,
}

/// A device as the caches key it: its driver API and ordinal.
pub type DeviceKey = (Api, i32);

fn devices() -> &'static Mutex<HashMap<DeviceKey, DeviceInfo>> {
    static DEVICES: OnceLock<Mutex<HashMap<DeviceKey, DeviceInfo>>> = OnceLock::new();
    DEVICES.get_or_init(Default::default)
}

/// The current device of `driver`, as the caches key it.
pub fn device_key(driver: &'static Driver) -> Result<DeviceKey> {
    Ok((driver.api(), driver.current_device()?))
}

/// The current device of `driver` and its properties (cached; no driver query after the first).
pub fn current_device(driver: &'static Driver) -> Result<(DeviceKey, DeviceInfo)> {
    let key = device_key(driver)?;
    let mut cache = devices().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(info) = cache.get(&key) {
        return Ok((key, info.clone()));
    }
    let info = DeviceInfo {
        arch: driver.arch_name(key.1)?,
        units: driver.multiprocessor_count(key.1)? as usize,
        limits: driver.device_limits(key.1)?,
    };
    cache.insert(key, info.clone());
    Ok((key, info))
}
