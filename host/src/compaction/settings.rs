//! Compaction settings (docs/CONTRACT.md §9.3): OpenClaw's defaults (`reserveTokens` 16384,
//! `keepRecentTokens` 20000), the embedded runner's reserve floor
//! (`agents.defaults.compaction.reserveTokensFloor`, default 20000, `0` disables it), and the
//! threshold check `shouldCompact`.
//!
//! **Small windows.** The defaults assume a window of 100k tokens or more. In a 4096-token
//! window a 20000-token reserve makes every context "over the threshold" and a 20000-token
//! keep-recent budget keeps everything, so nothing ever compacts. [`CompactionSettings::for_window`]
//! therefore caps the reserve and the keep-recent budget at a quarter of the window each.
//! OpenClaw caps only the reserve, at `window - min(8000, window / 2)` (`agent-settings.ts`);
//! a quarter is always below that cap, and it is what lets a 4096-token window compact.

use crate::config::CompactionConfig;

/// OpenClaw's `DEFAULT_COMPACTION_SETTINGS.reserveTokens`.
pub const DEFAULT_RESERVE_TOKENS: u64 = 16_384;
/// OpenClaw's `DEFAULT_COMPACTION_SETTINGS.keepRecentTokens`.
pub const DEFAULT_KEEP_RECENT_TOKENS: u64 = 20_000;
/// The embedded runner's reserve floor (`DEFAULT_AGENT_COMPACTION_RESERVE_TOKENS_FLOOR`).
pub const DEFAULT_RESERVE_TOKENS_FLOOR: u64 = 20_000;
/// The share of a small window the reserve and the keep-recent budget may each take (1/4).
pub const SMALL_WINDOW_DIVISOR: u64 = 4;

/// Compaction thresholds and retention (OpenClaw's `CompactionSettings`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionSettings {
    /// Whether automatic (threshold) compaction runs at all.
    pub enabled: bool,
    /// Tokens kept free for the summary prompt and the answer: compaction triggers when the
    /// context exceeds `window - reserve_tokens`.
    pub reserve_tokens: u64,
    /// About how many recent tokens stay verbatim after a compaction.
    pub keep_recent_tokens: u64,
}

impl Default for CompactionSettings {
    /// OpenClaw's `DEFAULT_COMPACTION_SETTINGS`, without the embedded runner's floor.
    fn default() -> Self {
        CompactionSettings {
            enabled: true,
            reserve_tokens: DEFAULT_RESERVE_TOKENS,
            keep_recent_tokens: DEFAULT_KEEP_RECENT_TOKENS,
        }
    }
}

impl CompactionSettings {
    /// The settings an embedded run uses with `config` (`agents.defaults.compaction`): the
    /// defaults, the reserve raised to `reserveTokensFloor` (20000 unless configured; `0`
    /// disables the floor), `keepRecentTokens` when configured and positive.
    ///
    /// ```
    /// use pincer_host::compaction::CompactionSettings;
    /// use pincer_host::config::CompactionConfig;
    /// let s = CompactionSettings::from_config(&CompactionConfig::default());
    /// assert_eq!((s.reserve_tokens, s.keep_recent_tokens), (20_000, 20_000));
    /// let no_floor = CompactionConfig { reserve_tokens_floor: Some(0), ..Default::default() };
    /// assert_eq!(CompactionSettings::from_config(&no_floor).reserve_tokens, 16_384);
    /// ```
    pub fn from_config(config: &CompactionConfig) -> Self {
        let floor = config
            .reserve_tokens_floor
            .unwrap_or(DEFAULT_RESERVE_TOKENS_FLOOR);
        let defaults = CompactionSettings::default();
        CompactionSettings {
            enabled: true,
            reserve_tokens: defaults.reserve_tokens.max(floor),
            keep_recent_tokens: config
                .keep_recent_tokens
                .filter(|&k| k > 0)
                .unwrap_or(defaults.keep_recent_tokens),
        }
    }

    /// These settings for a model with a `window`-token context: the reserve and the
    /// keep-recent budget each at most a quarter of the window (unchanged for a window of
    /// 80000 tokens or more with the defaults; `window` 0 means unknown and changes nothing).
    ///
    /// ```
    /// use pincer_host::compaction::CompactionSettings;
    /// let s = CompactionSettings { enabled: true, reserve_tokens: 20_000, keep_recent_tokens: 20_000 };
    /// let small = s.for_window(4096);
    /// assert_eq!((small.reserve_tokens, small.keep_recent_tokens), (1024, 1024));
    /// assert_eq!(s.for_window(200_000), s);
    /// ```
    pub fn for_window(self, window: u64) -> Self {
        if window == 0 {
            return self;
        }
        let cap = (window / SMALL_WINDOW_DIVISOR).max(1);
        CompactionSettings {
            enabled: self.enabled,
            reserve_tokens: self.reserve_tokens.min(cap),
            keep_recent_tokens: self.keep_recent_tokens.min(cap),
        }
    }
}

/// OpenClaw's `shouldCompact`: enabled, a known window, and `context_tokens > window - reserve`.
///
/// ```
/// use pincer_host::compaction::{should_compact, CompactionSettings};
/// let s = CompactionSettings::default().for_window(4096);
/// assert!(!should_compact(3000, 4096, &s));
/// assert!(should_compact(3100, 4096, &s));
/// assert!(!should_compact(3100, 0, &s));
/// ```
pub fn should_compact(context_tokens: u64, window: u64, settings: &CompactionSettings) -> bool {
    if !settings.enabled || window == 0 {
        return false;
    }
    // `window - reserve` may be negative in OpenClaw: then every context is over it.
    i128::from(context_tokens) > i128::from(window) - i128::from(settings.reserve_tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_raises_the_reserve_and_zero_disables_it() {
        let floor = |f: Option<u64>| {
            CompactionSettings::from_config(&CompactionConfig {
                reserve_tokens_floor: f,
                ..CompactionConfig::default()
            })
            .reserve_tokens
        };
        assert_eq!(floor(None), 20_000);
        assert_eq!(floor(Some(0)), 16_384);
        assert_eq!(floor(Some(30_000)), 30_000);
        assert_eq!(floor(Some(1_000)), 16_384, "the floor only raises");
    }

    #[test]
    fn a_4096_window_leaves_room_to_compact() {
        let s = CompactionSettings::from_config(&CompactionConfig::default()).for_window(4096);
        assert_eq!(s.reserve_tokens, 1024);
        assert_eq!(s.keep_recent_tokens, 1024);
        assert!(
            !should_compact(1000, 4096, &s),
            "a small context is not compacted"
        );
        assert!(should_compact(4000, 4096, &s));
        // Unscaled, every context would be over the threshold.
        let unscaled = CompactionSettings::from_config(&CompactionConfig::default());
        assert!(should_compact(1, 4096, &unscaled));
    }
}
