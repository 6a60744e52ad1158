//! [`ContextBuilder`]: building an [`AssembleResult`] from references to input messages and
//! new messages, with adjacent references merged into ranges.

use std::ops::Range;

use crate::abi::v1::{AssembleResult, AssembledItem, Message, PromptAuthority};
use crate::abi::{RBox, ROption, RString, RVec};

/// Builds the answer of `assemble`.
///
/// ```
/// use pincer_plugin_api::{ContextBuilder, Message, Role, AssembledItem};
/// let mut ctx = ContextBuilder::new();
/// ctx.keep(0);
/// ctx.push(Message::text(Role::User, "Summary of turns 1-40: …"));
/// ctx.keep(41);
/// ctx.keep(42);
/// let result = ctx.finish(1200);
/// assert_eq!(result.items.len(), 3);
/// assert!(matches!(result.items[2], AssembledItem::Input { start: 41, end: 43 }));
/// ```
#[derive(Debug, Default)]
pub struct ContextBuilder {
    items: RVec<AssembledItem>,
    system_prompt_addition: Option<String>,
    prompt_authority: PromptAuthority,
}

impl ContextBuilder {
    /// An empty context.
    pub fn new() -> Self {
        ContextBuilder::default()
    }

    /// Keeps input message `index` (appended after what is already there).
    pub fn keep(&mut self, index: usize) -> &mut Self {
        self.keep_range(index..index + 1)
    }

    /// Keeps input messages `range`.
    pub fn keep_range(&mut self, range: Range<usize>) -> &mut Self {
        if range.is_empty() {
            return self;
        }
        let (start, end) = (range.start as u64, range.end as u64);
        if let Some(AssembledItem::Input { end: last_end, .. }) = self.items.last_mut() {
            if *last_end == start {
                *last_end = end;
                return self;
            }
        }
        self.items.push(AssembledItem::Input { start, end });
        self
    }

    /// Appends a message the engine made.
    pub fn push(&mut self, message: Message) -> &mut Self {
        self.items.push(AssembledItem::New(RBox::new(message)));
        self
    }

    /// Sets text to prepend to the run's system prompt.
    pub fn system_prompt_addition(&mut self, text: impl Into<String>) -> &mut Self {
        self.system_prompt_addition = Some(text.into());
        self
    }

    /// Asks the host to keep its overflow precheck on.
    pub fn may_overflow(&mut self) -> &mut Self {
        self.prompt_authority = PromptAuthority::PreassemblyMayOverflow;
        self
    }

    /// The result, with the engine's token estimate of it.
    pub fn finish(&mut self, estimated_tokens: u64) -> AssembleResult {
        AssembleResult {
            items: std::mem::take(&mut self.items),
            estimated_tokens,
            system_prompt_addition: self
                .system_prompt_addition
                .take()
                .map(RString::from)
                .map_or(ROption::RNone, ROption::RSome),
            prompt_authority: self.prompt_authority,
        }
    }
}
