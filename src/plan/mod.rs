//! Above the kernel families, below the glue: which family serves a GPU call ([`dispatch`]:
//! Composable Kernel or our Triton kernels) and the work planned for it ([`work`]: the kernels,
//! their scratch and every argument, before anything is allocated). Pure Rust, compiled in every
//! build: the glue's launch, [`crate::explain`] and the host tests that compare the backends
//! without a GPU ([`work::dry_run`]) share it.

pub mod dispatch;
pub mod work;
