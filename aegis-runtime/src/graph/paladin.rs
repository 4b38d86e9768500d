//! `Paladin`, an LLM agent's configuration, and `Armament`, a tool it may call.

use async_trait::async_trait;
use serde_json::Value;
use std::fmt;
use std::sync::Arc;

use crate::canon::Canon;
use crate::error::PaladinError;
use crate::share::IntoShared;

/// A tool a Paladin may call.
#[async_trait]
pub trait Armament: Send + Sync + 'static {
    /// The tool's name, as the model calls it.
    fn name(&self) -> &str;
    /// What the tool does, for the model.
    fn description(&self) -> &str;
    /// The JSON Schema of the tool's arguments.
    fn parameters(&self) -> Value;
    /// Runs the tool.
    async fn invoke(&self, arguments: Value) -> Result<Value, PaladinError>;
}

/// An LLM agent's configuration.
#[derive(Clone)]
#[non_exhaustive]
pub struct Paladin {
    /// The agent's name.
    pub name: String,
    /// The model to call.
    pub model: String,
    /// The system prompt.
    pub system_prompt: Option<String>,
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// The most completion → tool-call rounds one execution may take.
    pub max_loops: u32,
    /// Stop sequences.
    pub stop_words: Vec<String>,
    /// The most tokens one completion may generate (`max_tokens` on the
    /// wire); `None` leaves it to the provider.
    pub max_tokens: Option<u32>,
    /// The tools the agent may call.
    pub armaments: Vec<Arc<dyn Armament>>,
}

impl Paladin {
    /// An agent named `name` with no model yet, one loop and no tools.
    pub fn new(name: impl Into<String>) -> Self {
        Paladin {
            name: name.into(),
            model: String::new(),
            system_prompt: None,
            temperature: None,
            max_loops: 1,
            stop_words: Vec::new(),
            max_tokens: None,
            armaments: Vec::new(),
        }
    }

    /// Sets the model.
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    /// Sets the system prompt.
    pub fn with_system_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.system_prompt = Some(prompt.into());
        self
    }

    /// Sets the temperature.
    pub fn with_temperature(mut self, temperature: f32) -> Self {
        self.temperature = Some(temperature);
        self
    }

    /// Sets the loop bound.
    pub fn with_max_loops(mut self, max_loops: u32) -> Self {
        self.max_loops = max_loops;
        self
    }

    /// Adds a stop sequence.
    pub fn with_stop_word(mut self, stop: impl Into<String>) -> Self {
        self.stop_words.push(stop.into());
        self
    }

    /// Bounds every completion to `max_tokens` generated tokens.
    pub fn with_max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }

    /// Adds a tool.
    pub fn with_armament(mut self, armament: impl IntoShared<dyn Armament>) -> Self {
        self.armaments.push(armament.into_shared());
        self
    }

    /// A digest of what changes the agent's answers: model, system prompt,
    /// temperature, max_loops, stop words and the token limit (and the
    /// tools' names). Part of the graph fingerprint and of node cache keys;
    /// an agent without a token limit digests as it did before the limit
    /// existed.
    pub fn config_fingerprint(&self) -> String {
        let mut c = Canon::new("aegis-paladin");
        c.str(&self.model)
            .serialize(&self.system_prompt)
            .serialize(&self.temperature.map(f32::to_bits))
            .u64(u64::from(self.max_loops))
            .serialize(&self.stop_words);
        let mut tools: Vec<&str> = self.armaments.iter().map(|a| a.name()).collect();
        tools.sort();
        c.serialize(&tools);
        if let Some(max_tokens) = self.max_tokens {
            c.str("max_tokens").u64(u64::from(max_tokens));
        }
        c.hex()
    }
}

impl fmt::Debug for Paladin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Paladin")
            .field("name", &self.name)
            .field("model", &self.model)
            .field("system_prompt", &self.system_prompt)
            .field("temperature", &self.temperature)
            .field("max_loops", &self.max_loops)
            .field("stop_words", &self.stop_words)
            .field("max_tokens", &self.max_tokens)
            .field(
                "armaments",
                &self.armaments.iter().map(|a| a.name()).collect::<Vec<_>>(),
            )
            .finish()
    }
}

// Taken by value or as an `Arc` wherever a constructor keeps one.
crate::share::into_shared_dyn!(Armament);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_limit_changes_the_digest_and_no_limit_keeps_the_old_one() {
        let plain = Paladin::new("A").with_model("m");
        // The digest an agent had before `max_tokens` existed.
        let mut c = Canon::new("aegis-paladin");
        c.str("m")
            .serialize(&None::<String>)
            .serialize(&None::<u32>)
            .u64(1)
            .serialize(&Vec::<String>::new())
            .serialize(&Vec::<&str>::new());
        assert_eq!(plain.config_fingerprint(), c.hex());
        let limited = plain.clone().with_max_tokens(64);
        assert_eq!(limited.max_tokens, Some(64));
        assert_ne!(limited.config_fingerprint(), plain.config_fingerprint());
        assert_ne!(
            limited.config_fingerprint(),
            plain.with_max_tokens(65).config_fingerprint()
        );
    }
}
