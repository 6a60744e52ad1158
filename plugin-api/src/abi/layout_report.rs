//! The layout report behind `cargo xtask abi-check`: every type reachable from the v1 root
//! module (and so from the engine and host-services vtables and every parameter, result and
//! message type), with its size, alignment, fields, variants and function signatures, as
//! deterministic text. The committed baseline is `plugin-api/abi/v1.layout.txt`; a test fails
//! when the report differs from it, because a frozen type changed layout.

use std::collections::{BTreeSet, HashSet, VecDeque};
use std::fmt::Write as _;

use abi_stable::type_layout::{TLData, TLFields, TypeLayout};
use abi_stable::StableAbi;

/// The report for everything the v1 root module reaches.
pub fn v1_report() -> String {
    report(&[
        <super::v1::PluginModuleRef as StableAbi>::LAYOUT,
        <super::v1::EngineBox as StableAbi>::LAYOUT,
        <super::v1::HostServicesArc as StableAbi>::LAYOUT,
        <super::v1::Message as StableAbi>::LAYOUT,
    ])
}

fn report(roots: &[&'static TypeLayout]) -> String {
    // Entries are kept whole and sorted, so the report does not depend on the walk's order;
    // two instantiations of one generic type differ in their fields' types.
    let mut entries: BTreeSet<String> = BTreeSet::new();
    let mut visited: HashSet<*const TypeLayout> = HashSet::new();
    let mut queue: VecDeque<&'static TypeLayout> = roots.iter().copied().collect();
    while let Some(layout) = queue.pop_front() {
        if !visited.insert(layout as *const TypeLayout) {
            continue;
        }
        let key = format!("{}::{}", layout.package(), layout.full_type());
        let mut text = format!(
            "{key}  size={} align={}\n",
            layout.size(),
            layout.alignment()
        );
        match layout.data() {
            TLData::Primitive(primitive) => {
                let _ = writeln!(text, "  primitive {primitive:?}");
            }
            TLData::Opaque => text.push_str("  opaque\n"),
            TLData::Struct { fields } => {
                text.push_str("  struct\n");
                fields_of(fields, &mut text, &mut queue);
            }
            TLData::Union { fields } => {
                text.push_str("  union\n");
                fields_of(fields, &mut text, &mut queue);
            }
            TLData::Enum(tl_enum) => {
                let names: Vec<&str> = tl_enum.variant_names_iter().collect();
                let counts: Vec<String> = tl_enum.field_count.iter().map(u8::to_string).collect();
                let _ = writeln!(
                    text,
                    "  enum {:?} variants {} fields per variant {}",
                    tl_enum.exhaustiveness,
                    names.join(";"),
                    counts.join(",")
                );
                fields_of(tl_enum.fields, &mut text, &mut queue);
            }
            TLData::PrefixType(prefix) => {
                let _ = writeln!(
                    text,
                    "  prefix first_suffix_field={}",
                    prefix.first_suffix_field
                );
                fields_of(prefix.fields, &mut text, &mut queue);
            }
        }
        for field in layout.phantom_fields().iter() {
            queue.push_back(field.layout());
        }
        entries.insert(text);
    }
    entries.into_iter().collect()
}

fn fields_of(fields: TLFields, text: &mut String, queue: &mut VecDeque<&'static TypeLayout>) {
    for field in fields.iter() {
        let _ = writeln!(text, "    {}: {}", field.name(), field.full_type());
        queue.push_back(field.layout());
        for function in field.function_range().iter() {
            let _ = writeln!(text, "      {function}");
            for param in function.param_type_layouts.iter() {
                queue.push_back(param());
            }
            if let Some(returns) = function.return_type_layout() {
                queue.push_back(returns());
            }
        }
    }
}

#[cfg(all(test, target_pointer_width = "64", target_os = "linux"))]
mod tests {
    use std::path::PathBuf;

    fn baseline_path() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("abi/v1.layout.txt")
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
