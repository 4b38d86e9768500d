//! How the attempt layer runs a Battalion's child graph without knowing
//! the engine's store: through [`RunsBattalion`], which the engine
//! implements. Only a Battalion attempt pays its dynamic call.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use crate::error::NodeError;
use crate::graph::{Directive, NodeContext, WarGraph};
use crate::state::{Battlefield, FieldName};

/// One attempt of a Battalion node, as the attempt layer hands it over.
pub(crate) struct BattalionCall<'a> {
    pub(crate) child: &'a Arc<WarGraph>,
    pub(crate) inputs: &'a [(FieldName, FieldName)],
    pub(crate) outputs: &'a [(FieldName, FieldName)],
    pub(crate) state: &'a Battlefield,
    pub(crate) ctx: &'a NodeContext,
    /// How often the node has been activated in the thread (1 = first):
    /// each visit is a child thread of its own.
    pub(crate) visit: u32,
    /// The parent attempt's shutdown grace: the ceiling of the child's.
    pub(crate) grace: Duration,
    /// When the parent attempt is cut: the child's enclosing deadline.
    pub(crate) enclosing: Option<Instant>,
}

/// What a Battalion attempt runs its child graph with: the engine, over
/// its store. Object-safe, so the attempt layer stays non-generic.
pub(crate) trait RunsBattalion: Sync {
    /// Starts or continues the child thread of `call` and maps its outcome
    /// to the parent attempt's.
    fn run_battalion<'a>(
        &'a self,
        call: BattalionCall<'a>,
    ) -> Pin<Box<dyn Future<Output = Result<Directive, NodeError>> + Send + 'a>>;
}
