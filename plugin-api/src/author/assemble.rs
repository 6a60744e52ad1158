//! [`ContextBuilder`] and [`AssembleResult`]: the answer of `assemble`, built from references to
//! input messages and new messages, with adjacent references merged into ranges.

use std::ops::Range;

use crate::abi::v1 as abi;
use crate::abi::{RBox, ROption, RString, RVec};
use crate::Message;

/// The answer of `assemble`: the context in prompt order, as references to the input messages
/// (no copies) plus messages the engine made. Build it with [`ContextBuilder`].
#[derive(Clone, Debug, PartialEq)]
pub struct AssembleResult(pub(crate) abi::AssembleResult);

impl AssembleResult {
    /// All `message_count` input messages, unchanged, with no token estimate ("the caller
    /// estimates"): what `legacy` answers.
    pub fn pass_through(message_count: usize) -> Self {
        let mut builder = ContextBuilder::new();
        builder.keep_range(0..message_count);
        builder.finish()
    }

    /// The messages this result stands for, in prompt order: references into `input` for kept
    /// messages, into the result for new ones.
    pub fn resolve<'a>(&'a self, input: &'a [Message]) -> Vec<&'a Message> {
        self.0.resolve(input)
    }

    /// The engine's token estimate, if it gave one.
    pub fn estimated_tokens(&self) -> Option<u64> {
        self.0.estimated_tokens.into_option()
    }

    /// The text to prepend to the system prompt.
    pub fn system_prompt_addition(&self) -> Option<&str> {
        self.0
            .system_prompt_addition
            .as_ref()
            .map(|s| s.as_str())
            .into_option()
    }

    /// The kept input ranges and new messages, in order.
    pub fn items(&self) -> impl Iterator<Item = ContextItem<'_>> {
        self.0.items.iter().map(|item| match item {
            abi::AssembledItem::Input { start, end } => {
                ContextItem::Kept(*start as usize..*end as usize)
            }
            abi::AssembledItem::New(message) => ContextItem::New(message),
        })
    }

    /// The ABI value.
    #[doc(hidden)]
    pub fn into_abi(self) -> abi::AssembleResult {
        self.0
    }
}

/// One item of an [`AssembleResult`].
#[derive(Clone, Debug, PartialEq)]
pub enum ContextItem<'a> {
    /// Input messages, by index.
    Kept(Range<usize>),
    /// A message the engine made.
    New(&'a Message),
}

/// Builds the answer of `assemble`.
///
/// ```
/// use pincer_plugin_api::{ContextBuilder, ContextItem, Message};
/// let mut ctx = ContextBuilder::new();
/// ctx.keep(0);
/// ctx.push(Message::compaction_summary("Turns 1-40: the user booked SEA→JFK.", 12_000));
/// ctx.keep(41);
/// ctx.keep(42);
/// let result = ctx.estimated_tokens(1200).finish();
/// let items: Vec<_> = result.items().collect();
/// assert_eq!(items.len(), 3);
/// assert_eq!(items[2], ContextItem::Kept(41..43));
/// assert_eq!(result.estimated_tokens(), Some(1200));
/// ```
#[derive(Debug, Default)]
pub struct ContextBuilder {
    items: RVec<abi::AssembledItem>,
    estimated_tokens: Option<u64>,
    system_prompt_addition: Option<String>,
    prompt_authority: abi::PromptAuthority,
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
        if let Some(abi::AssembledItem::Input { end: last_end, .. }) = self.items.last_mut() {
            if *last_end == start {
                *last_end = end;
                return self;
            }
        }
        self.items.push(abi::AssembledItem::Input { start, end });
        self
    }

    /// Appends a message the engine made (a summary, a note).
    pub fn push(&mut self, message: Message) -> &mut Self {
        self.items.push(abi::AssembledItem::New(RBox::new(message)));
        self
    }

    /// The engine's token estimate of the context (without one, the host estimates).
    pub fn estimated_tokens(&mut self, tokens: u64) -> &mut Self {
        self.estimated_tokens = Some(tokens);
        self
    }

    /// Sets text to prepend to the run's system prompt.
    pub fn system_prompt_addition(&mut self, text: impl Into<String>) -> &mut Self {
        self.system_prompt_addition = Some(text.into());
        self
    }

    /// Asks the host to keep its overflow precheck on (`promptAuthority:
    /// "preassembly_may_overflow"`).
    pub fn may_overflow(&mut self) -> &mut Self {
        self.prompt_authority = abi::PromptAuthority::PreassemblyMayOverflow;
        self
    }

    /// The result.
    pub fn finish(&mut self) -> AssembleResult {
        AssembleResult(abi::AssembleResult {
            items: std::mem::take(&mut self.items),
            estimated_tokens: self.estimated_tokens.take().into(),
            system_prompt_addition: self
                .system_prompt_addition
                .take()
                .map(RString::from)
                .map_or(ROption::RNone, ROption::RSome),
            prompt_authority: std::mem::take(&mut self.prompt_authority),
        })
    }
}
