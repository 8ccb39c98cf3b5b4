//! The one place that loads and calls the Lua scripts in `lua/`.
//!
//! `lua/prelude.lua` (shared helpers) is prepended to each script.
//!
//! Each script is one state transition. It is sent with `EVALSHA`; when
//! Redis answers NOSCRIPT (restart, failover, `SCRIPT FLUSH`) the script is
//! loaded again and the call retried once.

use std::sync::OnceLock;

use fred::prelude::{Client, FromValue, Value};
use fred::types::scripts::Script;

/// A script of `lua/`, known by its file name.
pub(crate) struct LuaScript {
    pub name: &'static str,
    source: &'static str,
    script: OnceLock<Script>,
}

macro_rules! lua_scripts {
    ($($konst:ident = $file:literal;)*) => {
        $(
            pub(crate) static $konst: LuaScript = LuaScript {
                name: $file,
                source: concat!(include_str!("../lua/prelude.lua"), include_str!(concat!("../lua/", $file, ".lua"))),
                script: OnceLock::new(),
            };
        )*
        /// Every script, for tests and for loading them up front.
        #[cfg(test)]
        pub(crate) static ALL: &[&LuaScript] = &[$(&$konst),*];
    };
}

lua_scripts! {
    SEND = "send";
    PROMOTE = "promote";
    CLAIM = "claim";
    ACK = "ack";
    NACK = "nack";
    TIMEOUT = "timeout";
    CANCEL = "cancel";
    GC = "gc";
    STATS = "stats";
}

impl LuaScript {
    fn script(&self) -> &Script {
        self.script.get_or_init(|| Script::from_lua(self.source))
    }

    /// The SHA1 that `EVALSHA` names the script by.
    #[cfg(test)]
    pub fn sha1(&self) -> &str {
        self.script().sha1()
    }

    /// Runs the script with `EVALSHA`, reloading it on NOSCRIPT.
    pub async fn call<R: FromValue>(
        &self,
        client: &Client,
        keys: Vec<String>,
        args: Vec<Value>,
    ) -> Result<R, fred::error::Error> {
        tracing::trace!(script = self.name, keys = keys.len(), args = args.len(), "evalsha");
        self.script().evalsha_with_reload(client, keys, args).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_documents_its_interface() {
        for s in ALL {
            for part in ["KEYS[1]", "Returns", "Complexity", "Idempotent"] {
                assert!(s.source.contains(part), "lua/{}.lua header lacks {part}", s.name);
            }
            assert_eq!(s.sha1().len(), 40);
        }
    }
}
