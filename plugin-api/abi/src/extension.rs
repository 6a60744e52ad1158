//! The checked extension point: how a 1.x minor adds capabilities without making older
//! plugins unloadable.
//!
//! abi_stable's layout check is directional: a host compiled against a root module or engine
//! vtable with *more* members refuses every plugin compiled with fewer. So v1's root module,
//! engine object and host services are frozen, each ending in an `extension(name)` member.
//! A later minor defines an extension module — a `#[repr(C)]` prefix type with its own
//! `*_Ref` — and publishes it under a name such as `"pincer.engine.commit-turn.v1"`. A plugin
//! that has it returns an [`ExtensionRef`] from `extension(name)`; the host calls [`resolve`]
//! to compare layouts before use, and treats `RNone` (older plugins) as "not supported".

use abi_stable::abi_stability::abi_checking::check_layout_compatibility;
use abi_stable::StableAbi;

use crate::v1::ExtensionRef;

/// Publishes `module` (a `&'static` `*_Ref` of an extension prefix type) as an extension.
pub fn publish<T: StableAbi + Copy + 'static>(module: &'static T) -> ExtensionRef {
    ExtensionRef {
        layout: T::LAYOUT,
        module: module as *const T as *const (),
    }
}

/// Why an extension could not be used.
#[derive(Debug)]
pub struct ExtensionMismatch {
    /// The first line of abi_stable's report.
    pub summary: String,
}

impl std::fmt::Display for ExtensionMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "extension layout differs from the host's: {}",
            self.summary
        )
    }
}

impl std::error::Error for ExtensionMismatch {}

/// Checks `ext` against the host's layout of `T` and returns the module.
///
/// # Safety
/// `ext` must come from a plugin's `extension(name)` answer (that is, from [`publish`] in the
/// plugin), so that `ext.module` points to a live `'static` value whose layout is `ext.layout`.
///
/// # Errors
/// When the plugin's layout of the extension is not compatible with the host's.
pub unsafe fn resolve<T: StableAbi + Copy + 'static>(
    ext: ExtensionRef,
) -> Result<T, ExtensionMismatch> {
    check_layout_compatibility(T::LAYOUT, ext.layout).map_err(|errors| ExtensionMismatch {
        summary: errors
            .to_string()
            .lines()
            .find(|l| l.contains("Error") || l.contains("mismatch"))
            .unwrap_or("layouts differ")
            .trim()
            .to_owned(),
    })?;
    // SAFETY: the layouts are compatible, and the caller promises `publish` stored a
    // `&'static T` of that layout.
    Ok(unsafe { *(ext.module as *const T) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C)]
    #[derive(StableAbi, Clone, Copy)]
    struct Counter {
        value: u64,
    }

    #[repr(C)]
    #[derive(StableAbi, Clone, Copy)]
    struct Other {
        value: u32,
    }

    static COUNTER: Counter = Counter { value: 42 };

    #[test]
    fn same_layout_resolves_and_a_different_one_is_refused() {
        let ext = publish(&COUNTER);
        // SAFETY: `ext` comes from `publish`.
        assert_eq!(unsafe { resolve::<Counter>(ext) }.unwrap().value, 42);
        // SAFETY: as above; the layout check refuses before any read.
        let err = unsafe { resolve::<Other>(ext) }
            .err()
            .expect("u64 vs u32 must be refused");
        assert!(!err.summary.is_empty());
    }
}
