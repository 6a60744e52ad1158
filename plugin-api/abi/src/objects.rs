//! Building the ABI's shared trait objects from Rust values: the host-services object a host
//! hands every engine, another handle to it, and a host-made spawn rollback.

use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::std_types::RArc;

use crate::v1::{
    HostServicesAbi, HostServicesAbi_TO, HostServicesArc, SpawnRollbackAbi, SpawnRollbackAbi_TO,
    SpawnRollbackBox,
};

/// Wraps a host's implementation of the host services into the shared object engines hold.
pub fn host_services<T: HostServicesAbi + Send + Sync + 'static>(services: T) -> HostServicesArc {
    HostServicesAbi_TO::from_ptr(RArc::new(services), TD_Opaque)
}

/// Another handle to the same host services (a reference-count increment).
pub fn share_host_services(services: &HostServicesArc) -> HostServicesArc {
    HostServicesAbi_TO::from_sabi(services.obj.shallow_clone())
}

/// A rollback object made by the host (an isolated engine's rollback runs in its worker), in
/// the shape `prepareSubagentSpawn` returns.
pub fn host_spawn_rollback<T: SpawnRollbackAbi + 'static>(rollback: T) -> SpawnRollbackBox {
    SpawnRollbackAbi_TO::from_value(rollback, TD_Opaque)
}
