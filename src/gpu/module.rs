//! Code objects and their kernels: loading, lookup and launch, the same code for both APIs.

use std::ffi::{c_void, CString};

use super::{Call, Driver, GpuError, GpuResult, Handle, UnloadFn};

/// A loaded code object (`hipModule_t` / `CUmodule`), unloaded on drop.
pub struct Module {
    handle: Handle,
    unload: UnloadFn,
}

// SAFETY: the handle is an opaque token of the driver, which synchronizes its own module tables;
// it is never dereferenced here, and both drivers accept module handles from any thread.
unsafe impl Send for Module {}
// SAFETY: as for Send; `&Module` only lends the handle to driver calls (`get_function`).
unsafe impl Sync for Module {}

impl Drop for Module {
    fn drop(&mut self) {
        // SAFETY: the handle came from a successful load and is unloaded once, here; `unload`
        // belongs to a never-dropped Driver's library. A failing unload cannot be returned from
        // drop and only leaks the module (CUDA: also when no context is current on this
        // thread), so its status is deliberately ignored.
        let _ = unsafe { (self.unload)(self.handle) };
    }
}

/// A kernel of a loaded [`Module`] (`hipFunction_t` / `CUfunction`), valid while the module is.
#[derive(Clone, Copy, Debug)]
pub struct Function(Handle);

// SAFETY: an opaque driver token, never dereferenced here; the drivers accept it from any thread.
unsafe impl Send for Function {}
// SAFETY: as for Send.
unsafe impl Sync for Function {}

impl Driver {
    /// Loads a code object (HSACO / cubin, or PTX text the CUDA driver compiles) into the
    /// current device or context (`hipModuleLoadData` / `cuModuleLoadData`).
    pub fn load_module(&self, image: &[u8]) -> GpuResult<Module> {
        let shared = self.backend.shared();
        let Call { name, function } = shared.load_module;
        let mut handle = std::ptr::null_mut();
        // The driver reads PTX up to its NUL; an ELF image carries its own sizes.
        let terminated;
        let image = if image.starts_with(b"\x7fELF") || image.last() == Some(&0) {
            image
        } else {
            terminated = [image, &[0]].concat();
            &terminated[..]
        };
        // SAFETY: `image` is a whole code object (or NUL-terminated PTX) in host memory, read
        // during the call only.
        self.backend.check(name, unsafe {
            function(&mut handle, image.as_ptr().cast())
        })?;
        Ok(Module {
            handle,
            unload: shared.unload_module,
        })
    }

    /// The kernel `name` of `module` (`hipModuleGetFunction` / `cuModuleGetFunction`).
    pub fn get_function(&self, module: &Module, name: &str) -> GpuResult<Function> {
        let c_name = CString::new(name).map_err(|_| {
            let message = format!("kernel name {name:?} contains NUL");
            GpuError::local(self.api(), "get_function", message)
        })?;
        let Call {
            name: call,
            function,
        } = self.backend.shared().get_function;
        let mut kernel = std::ptr::null_mut();
        // SAFETY: `module` is alive (borrowed); `c_name` is NUL-terminated.
        self.backend.check(call, unsafe {
            function(&mut kernel, module.handle, c_name.as_ptr())
        })?;
        Ok(Function(kernel))
    }

    /// Lets `f` use `bytes` of dynamic shared memory (LDS) where the driver requires an opt-in
    /// above a default limit: CUDA above 48 KiB (`cuFuncSetAttribute`). HIP has no such opt-in
    /// for module kernels (`hipModuleLaunchKernel` checks the size against the device's LDS
    /// only), so there nothing is done.
    pub fn allow_shared(&self, f: Function, bytes: u32) -> GpuResult<()> {
        self.backend.allow_shared(f.0, bytes)
    }

    /// Launches `f` on `stream` (`hipModuleLaunchKernel` / `cuLaunchKernel`) with
    /// `kernelParams = args`, each element pointing at one argument value, and no `extra`.
    ///
    /// # Safety
    /// `args` must match the kernel's parameter list in number, order and types, and every
    /// pointer the kernel arguments carry must be valid for what the kernel does with it;
    /// `stream` is a live stream of the current device, or 0 for the default stream; the module
    /// of `f` is still loaded.
    pub unsafe fn launch(
        &self,
        f: Function,
        grid: [u32; 3],
        block: [u32; 3],
        shared: u32,
        stream: usize,
        args: &mut [*mut c_void],
    ) -> GpuResult<()> {
        let Call { name, function } = self.backend.shared().launch;
        let params = if args.is_empty() {
            std::ptr::null_mut()
        } else {
            args.as_mut_ptr()
        };
        let ([gx, gy, gz], [bx, by, bz]) = (grid, block);
        let (stream, extra) = (stream as Handle, std::ptr::null_mut());
        // SAFETY: forwarded from this function's contract.
        let status =
            unsafe { function(f.0, gx, gy, gz, bx, by, bz, shared, stream, params, extra) };
        self.backend.check(name, status)
    }
}
