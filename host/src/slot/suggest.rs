//! "Did you mean": the known engine or plugin id nearest to one nobody has, for the error that
//! names it (`plugins enable|disable|select|inspect|reload`, the slot's engine at resolution,
//! `--engine` of `check-engine` and the other commands that run an engine).
//!
//! An id is suggested when it is within a third of the asked id's length in edits (one at
//! least; swapping two neighbouring characters is one edit), when it differs only in case, or
//! when the asked id is the start of exactly one known id (`sliding` for `sliding-window`).
//! Nothing is suggested when no id is that close: a suggestion must look like the typo it is.

use std::fmt;

/// The known id nearest to an unknown one, if any is close enough. `Display` gives
/// `. Did you mean "ID"?` (nothing without one), to end the sentence that names the unknown id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Suggestion<'a>(Option<&'a str>);

impl<'a> Suggestion<'a> {
    /// The nearest of `known` to `asked` (see the module docs); ties go to the first.
    pub fn nearest<I, S>(asked: &str, known: I) -> Self
    where
        I: IntoIterator<Item = &'a S>,
        S: AsRef<str> + ?Sized + 'a,
    {
        let known: Vec<&'a str> = known.into_iter().map(AsRef::as_ref).collect();
        if asked.is_empty() || known.contains(&asked) {
            return Suggestion(None);
        }
        if let Some(same) = known.iter().find(|k| k.eq_ignore_ascii_case(asked)) {
            return Suggestion(Some(same));
        }
        let limit = (asked.chars().count() / 3).max(1);
        let closest = known
            .iter()
            .map(|k| (edit_distance(asked, k), *k))
            .filter(|(distance, _)| *distance <= limit)
            .min_by_key(|(distance, _)| *distance)
            .map(|(_, k)| k);
        if closest.is_some() {
            return Suggestion(closest);
        }
        let mut extended = known
            .iter()
            .filter(|k| asked.len() >= 3 && k.starts_with(asked));
        match (extended.next(), extended.next()) {
            (Some(only), None) => Suggestion(Some(only)),
            _ => Suggestion(None),
        }
    }
}

impl fmt::Display for Suggestion<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(id) => write!(f, ". Did you mean \"{id}\"?"),
            None => Ok(()),
        }
    }
}

/// The edits (insert, delete, substitute, swap two neighbours) that turn `a` into `b`: the
/// optimal string alignment distance, over characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // Three rows: two back (for swaps), the previous one, the current one.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current: Vec<usize> = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        current[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (previous[j] + 1)
                .min(current[j - 1] + 1)
                .min(previous[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(before[j - 2] + 1);
            }
            current[j] = best;
        }
        std::mem::swap(&mut before, &mut previous);
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    const ENGINES: [&str; 4] = ["faulty", "legacy", "lossless", "sliding-window"];

    fn nearest(asked: &str) -> Option<&'static str> {
        Suggestion::nearest(asked, &ENGINES).0
    }

    #[test]
    fn a_typo_gets_the_id_it_misspells() {
        assert_eq!(nearest("sliding-windw"), Some("sliding-window"));
        assert_eq!(nearest("lossles"), Some("lossless"));
        assert_eq!(nearest("lsosless"), Some("lossless"));
        assert_eq!(nearest("Legacy"), Some("legacy"));
        assert_eq!(nearest("sliding"), Some("sliding-window"));
    }

    #[test]
    fn nothing_close_suggests_nothing() {
        assert_eq!(nearest("nope"), None);
        assert_eq!(nearest("lossless-claw"), None);
        assert_eq!(nearest("legacy"), None);
        assert_eq!(nearest(""), None);
        assert_eq!(Suggestion::nearest("x", &[] as &[&str]).0, None);
    }

    #[test]
    fn it_ends_the_sentence_that_names_the_id() {
        assert_eq!(
            Suggestion::nearest("faulti", &ENGINES).to_string(),
            ". Did you mean \"faulty\"?"
        );
        assert_eq!(Suggestion::nearest("nope", &ENGINES).to_string(), "");
    }

    #[test]
    fn edit_distance_counts_swaps_as_one() {
        assert_eq!(edit_distance("abc", "abc"), 0);
        assert_eq!(edit_distance("abc", "acb"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
