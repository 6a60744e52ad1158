//! The layout report behind `cargo xtask abi-check`: every type reachable from the v1 root
//! module (and so from the engine and host-services vtables and every parameter, result and
//! message type), with its size, alignment, fields, variants and function signatures, as
//! deterministic text. The committed baseline is `plugin-api/abi/v1.layout.txt`; a test fails
//! when the report differs from it, because a frozen type changed layout.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::Write as _;

use abi_stable::type_layout::{TLData, TLFields, TypeLayout};
use abi_stable::StableAbi;

/// The report for everything the v1 root module reaches.
pub fn v1_report() -> String {
    report(&[
        <crate::v1::PluginModuleRef as StableAbi>::LAYOUT,
        <crate::v1::EngineBox as StableAbi>::LAYOUT,
        <crate::v1::HostServicesArc as StableAbi>::LAYOUT,
        <crate::v1::Message as StableAbi>::LAYOUT,
    ])
}

/// Every reachable type, one entry each, sorted: `#<id> <package>::<type>` with what abi_stable
/// checks of it (size, alignment, `repr`, tag, data kind, enum variants and discriminants,
/// prefix-type split), and each field, parameter and return type named by the *id of its own
/// entry*. An id is a hash of the entry's text, so it covers the whole tree below it: two
/// instantiations of a generic type (`ROption<u64>`, `ROption<RString>`) get different ids, and
/// a changed field type changes the ids of every type that contains it.
fn report(roots: &[&'static TypeLayout]) -> String {
    let mut walk = Walk::default();
    for root in roots {
        walk.id(root);
    }
    walk.entries.into_iter().collect()
}

/// FNV-1a, 64 bits: a hash that is the same on every toolchain (std's is not promised to be).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[derive(Default)]
struct Walk {
    ids: HashMap<*const TypeLayout, String>,
    in_progress: HashSet<*const TypeLayout>,
    entries: BTreeSet<String>,
}

impl Walk {
    /// The id of `layout`'s entry, describing it (and everything below it) first.
    fn id(&mut self, layout: &'static TypeLayout) -> String {
        let key = layout as *const TypeLayout;
        if let Some(id) = self.ids.get(&key) {
            return id.clone();
        }
        if self.in_progress.contains(&key) {
            // A type that contains itself (through a pointer): named, not expanded again.
            return format!("cycle:{}", layout.full_type());
        }
        self.in_progress.insert(key);
        let body = self.describe(layout);
        self.in_progress.remove(&key);
        let id = format!("{:016x}", fnv1a(body.as_bytes()));
        self.entries.insert(format!(
            "#{id} {}::{}\n{body}",
            layout.package(),
            layout.full_type()
        ));
        self.ids.insert(key, id.clone());
        id
    }

    fn describe(&mut self, layout: &'static TypeLayout) -> String {
        let mut text = format!(
            "  size={} align={} repr={:?} tag={}\n",
            layout.size(),
            layout.alignment(),
            layout.repr_attr(),
            layout.tag()
        );
        match layout.data() {
            TLData::Primitive(primitive) => {
                let _ = writeln!(text, "  primitive {primitive:?}");
            }
            TLData::Opaque => text.push_str("  opaque\n"),
            TLData::Struct { fields } => {
                text.push_str("  struct\n");
                self.fields(fields, &mut text);
            }
            TLData::Union { fields } => {
                text.push_str("  union\n");
                self.fields(fields, &mut text);
            }
            TLData::Enum(tl_enum) => {
                let names: Vec<&str> = tl_enum.variant_names_iter().collect();
                let counts: Vec<String> = tl_enum.field_count.iter().map(u8::to_string).collect();
                let _ = writeln!(
                    text,
                    "  enum {:?} variants {} fields per variant {} discriminants {:?}",
                    tl_enum.exhaustiveness,
                    names.join(";"),
                    counts.join(","),
                    tl_enum.discriminants
                );
                self.fields(tl_enum.fields, &mut text);
            }
            TLData::PrefixType(prefix) => {
                let _ = writeln!(
                    text,
                    "  prefix first_suffix_field={} conditional={:?}",
                    prefix.first_suffix_field, prefix.conditional_prefix_fields
                );
                self.fields(prefix.fields, &mut text);
            }
        }
        for field in layout.phantom_fields().iter() {
            let id = self.id(field.layout());
            let _ = writeln!(text, "  phantom {}: #{id}", field.name());
        }
        text
    }

    fn fields(&mut self, fields: TLFields, text: &mut String) {
        for field in fields.iter() {
            let id = self.id(field.layout());
            let _ = writeln!(text, "    {}: {} #{id}", field.name(), field.full_type());
            for function in field.function_range().iter() {
                let params: Vec<String> = function
                    .param_type_layouts
                    .iter()
                    .map(|param| format!("#{}", self.id(param())))
                    .collect();
                let returns = function
                    .return_type_layout()
                    .map(|returns| format!("#{}", self.id(returns())))
                    .unwrap_or_else(|| "()".to_owned());
                let _ = writeln!(
                    text,
                    "      fn {}({}) -> {returns}",
                    function.name,
                    params.join(", ")
                );
            }
        }
    }
}

#[cfg(test)]
mod sensitivity {
    //! The report must change when only a generic argument changes: the same struct name and
    //! field names, `ROption<u64>` and `ROption<i64>` swapped.
    use abi_stable::std_types::ROption;
    use abi_stable::StableAbi;

    mod before {
        use super::*;
        #[repr(C)]
        #[derive(StableAbi)]
        pub struct T {
            pub x: ROption<u64>,
            pub y: ROption<i64>,
        }
    }

    mod after {
        use super::*;
        #[repr(C)]
        #[derive(StableAbi)]
        pub struct T {
            pub x: ROption<i64>,
            pub y: ROption<u64>,
        }
    }

    #[test]
    fn a_changed_generic_argument_changes_the_report() {
        let before = super::report(&[<before::T as StableAbi>::LAYOUT]);
        let after = super::report(&[<after::T as StableAbi>::LAYOUT]);
        assert_ne!(before, after);
        // Same size, alignment and field names: only the ids tell them apart.
        assert!(before.contains("x: ROption #") && after.contains("x: ROption #"));
    }
}

#[cfg(all(test, target_pointer_width = "64", target_os = "linux"))]
mod tests {
    use std::path::PathBuf;

    fn baseline_path() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("v1.layout.txt")
    }

    /// `cargo xtask abi-check` runs this test; `cargo xtask abi-check --bless` sets
    /// `PINCER_ABI_BLESS=1` to rewrite the baseline.
    #[test]
    fn abi_layouts_match_the_committed_baseline() {
        let report = super::v1_report();
        let path = baseline_path();
        if std::env::var_os("PINCER_ABI_BLESS").is_some() {
            std::fs::write(&path, &report).expect("write the baseline");
            return;
        }
        let baseline = std::fs::read_to_string(&path).unwrap_or_default();
        if baseline != report {
            let first_difference = baseline
                .lines()
                .zip(report.lines())
                .enumerate()
                .find(|(_, (a, b))| a != b)
                .map(|(i, (a, b))| format!("line {}:\n  baseline: {a}\n  now:      {b}", i + 1))
                .unwrap_or_else(|| "one report is a prefix of the other".to_owned());
            panic!(
                "the v1 ABI changed layout ({}): every 1.x plugin built before this change \
                 would be refused. Put new capabilities behind an `extension` instead (see the \
                 crate docs, \"Evolution\"). Only before 1.0 is published may the baseline be \
                 rewritten, with `cargo xtask abi-check --bless`.\nfirst difference at {first_difference}",
                path.display()
            );
        }
    }
}
