//! Plugin administration: the operator's commands that change what is installed and what the
//! slot names — `pincer plugins install|enable|disable|select|remove` and `doctor --fix`'s
//! edits (`manage`) — by editing `pincer.json` and the plugin folders. Nothing here opens a
//! library or touches a running runtime.

pub(crate) mod manage;

pub use manage::{InstallMode, ManageError, Outcome, PluginCommands, SlotChange};
