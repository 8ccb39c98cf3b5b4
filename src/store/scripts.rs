//! The one place that loads and calls the Lua scripts in `lua/`.
//!
//! `lua/prelude.lua` (shared helpers) is prepended to each script, after
//! the script's first line: its shebang (`#!lua flags=...`). The flags
//! decide what Redis does when it is out of memory: `send` has none, so
//! Redis refuses it before it runs (a send never half-writes), while the
//! consumer's scripts say `allow-oom`, so consumers keep draining, acking
//! and so freeing memory; read-only scripts say `no-writes`.
//!
//! Each script is one state transition. It is sent with `EVALSHA`; when
//! Redis answers NOSCRIPT (restart, failover, `SCRIPT FLUSH`) the call is
//! repeated once as `EVAL` with the whole source, which cannot fail with
//! NOSCRIPT and caches the script again. (Loading it and retrying `EVALSHA`
//! would fail again should another flush come in between.)

use std::sync::OnceLock;

use fred::prelude::{Client, FromValue, LuaInterface, Value};
use fred::types::scripts::Script;

/// A script of `lua/`, known by its file name.
pub(crate) struct LuaScript {
    pub name: &'static str,
    pub(crate) file: &'static str,
    /// The assembled source and its SHA1, built at first use.
    script: OnceLock<(Script, String)>,
}

const PRELUDE: &str = include_str!("../../lua/prelude.lua");

macro_rules! lua_scripts {
    ($($konst:ident = $file:literal;)*) => {
        $(
            pub(crate) static $konst: LuaScript = LuaScript {
                name: $file,
                file: include_str!(concat!("../../lua/", $file, ".lua")),
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
    EXTEND = "extend";
    ACK = "ack";
    NACK = "nack";
    TIMEOUT = "timeout";
    CANCEL = "cancel";
    RESCHEDULE = "reschedule";
    GC = "gc";
    REQUEUE = "requeue";
    PURGE = "purge";
    STATS = "stats";
    LIST = "list";
    GET = "get";
    SCAN = "scan";
    INSPECT = "inspect";
}

impl LuaScript {
    fn script(&self) -> &(Script, String) {
        self.script.get_or_init(|| {
            let source = self.source();
            (Script::from_lua(source.clone()), source)
        })
    }

    /// The shebang line, then the prelude, then the rest of the file.
    pub(crate) fn source(&self) -> String {
        let (shebang, body) = self.file.split_once('\n').unwrap_or((self.file, ""));
        format!("{shebang}\n{PRELUDE}{body}")
    }

    /// The SHA1 that `EVALSHA` names the script by.
    #[cfg(test)]
    pub(crate) fn sha1(&self) -> &str {
        self.script().0.sha1()
    }

    /// Runs the script with `EVALSHA`, or `EVAL` when Redis does not have it.
    pub(crate) async fn call<R: FromValue>(
        &self,
        client: &Client,
        keys: Vec<String>,
        args: Vec<Value>,
    ) -> Result<R, fred::error::Error> {
        tracing::trace!(script = self.name, keys = keys.len(), args = args.len(), "evalsha");
        let (script, source) = self.script();
        match client.evalsha(script.sha1().clone(), keys.clone(), args.clone()).await {
            Err(e) if e.details().starts_with("NOSCRIPT") => {
                // Routine: every script's first call on a server, and after a restart or flush.
                tracing::debug!(
                    script = self.name,
                    "script not in the server's cache yet; sending its source"
                );
                client.eval(source.as_str(), keys, args).await
            }
            result => result,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_documents_its_interface() {
        for s in ALL {
            assert!(s.file.starts_with("#!lua"), "lua/{}.lua lacks its shebang line", s.name);
            for part in ["KEYS[1]", "Returns", "Complexity", "Idempotent"] {
                assert!(s.file.contains(part), "lua/{}.lua header lacks {part}", s.name);
            }
            assert_eq!(s.sha1().len(), 40);
        }
    }
}
