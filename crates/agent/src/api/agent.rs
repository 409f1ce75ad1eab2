//! `GET /v1/agent/self`'s `stats`: Nomad's Go client declares them
//! `map[string]map[string]string`, so every value is a string (a bool or a number
//! there fails the whole decode), and Nomad always has a `nomad` section, which
//! python-nomad's users read (`stats.nomad.leader`). schedstate's own numbers are a
//! section of their own, `schedstate`, as strings too.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `stats`: section → key → value, every value a string (Go's type).
pub type AgentStats = BTreeMap<String, BTreeMap<String, String>>;

/// The answering server's own view (`stats.schedstate`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentSelf {
    /// The server's id.
    pub id: u64,
    /// Whether it has never been part of a cluster (no membership, no log, no vote).
    pub fresh: bool,
    /// The leader it knows of.
    pub leader: Option<u64>,
    /// Its current term.
    pub term: u64,
    /// The last log index applied to its store.
    pub last_applied: u64,
}

/// Nomad's `stats.nomad` section, as a server answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NomadStats {
    /// Whether the answering server is the leader.
    pub leader: bool,
    /// The leader's address (`host:port`), empty when none is known.
    pub leader_addr: String,
    /// Whether the server runs in Nomad's single-server bootstrap mode
    /// (`bootstrap_expect = 1`): schedstate never does — a cluster is formed by its
    /// lowest id once every peer answers — so always `false`.
    pub bootstrap: bool,
    /// How many regions the server knows (schedstate serves one).
    pub known_regions: usize,
}

/// A `stats.schedstate` section that does not read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("stats.schedstate.{key}: {reason}")]
pub struct StatsError {
    /// The key at fault.
    pub key: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

fn text(b: bool) -> String {
    if b { "true" } else { "false" }.to_string()
}

impl AgentSelf {
    /// Its `stats.schedstate` section: every value a string, the leader `""` when
    /// none is known.
    pub fn to_stats(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("id".into(), self.id.to_string()),
            ("fresh".into(), text(self.fresh)),
            (
                "leader".into(),
                self.leader.map(|l| l.to_string()).unwrap_or_default(),
            ),
            ("term".into(), self.term.to_string()),
            ("last_applied".into(), self.last_applied.to_string()),
        ])
    }

    /// Reads a `stats.schedstate` section back.
    ///
    /// # Errors
    /// A key missing or not of its type.
    pub fn from_stats(s: &BTreeMap<String, String>) -> Result<AgentSelf, StatsError> {
        fn get<'a>(
            s: &'a BTreeMap<String, String>,
            key: &'static str,
        ) -> Result<&'a str, StatsError> {
            s.get(key).map(String::as_str).ok_or(StatsError {
                key,
                reason: "missing".into(),
            })
        }
        fn num(s: &BTreeMap<String, String>, key: &'static str) -> Result<u64, StatsError> {
            let v = get(s, key)?;
            v.parse().map_err(|_| StatsError {
                key,
                reason: format!("{v:?} is not a number"),
            })
        }
        let fresh = match get(s, "fresh")? {
            "true" => true,
            "false" => false,
            other => {
                return Err(StatsError {
                    key: "fresh",
                    reason: format!("{other:?} is not true or false"),
                });
            }
        };
        let leader = match get(s, "leader")? {
            "" => None,
            _ => Some(num(s, "leader")?),
        };
        Ok(AgentSelf {
            id: num(s, "id")?,
            fresh,
            leader,
            term: num(s, "term")?,
            last_applied: num(s, "last_applied")?,
        })
    }
}

impl NomadStats {
    /// Nomad's `stats.nomad`: `server` always `"true"` (every schedstate agent is a
    /// server), `leader`, `leader_addr`, `bootstrap`, `known_regions`.
    pub fn to_stats(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("server".into(), text(true)),
            ("leader".into(), text(self.leader)),
            ("leader_addr".into(), self.leader_addr.clone()),
            ("bootstrap".into(), text(self.bootstrap)),
            ("known_regions".into(), self.known_regions.to_string()),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedstate_section_is_strings_and_reads_back() {
        for me in [
            AgentSelf {
                id: 2,
                fresh: false,
                leader: Some(1),
                term: 7,
                last_applied: 42,
            },
            AgentSelf {
                id: 1,
                fresh: true,
                leader: None,
                term: 0,
                last_applied: 0,
            },
        ] {
            let s = me.to_stats();
            assert_eq!(AgentSelf::from_stats(&s), Ok(me.clone()));
        }
        let mut s = AgentSelf {
            id: 1,
            fresh: true,
            leader: None,
            term: 0,
            last_applied: 0,
        }
        .to_stats();
        assert_eq!(s["leader"], "");
        assert_eq!(s["fresh"], "true");
        s.insert("term".into(), "x".into());
        assert_eq!(AgentSelf::from_stats(&s).unwrap_err().key, "term");
        s.remove("id");
        assert_eq!(AgentSelf::from_stats(&s).unwrap_err().key, "id");
    }

    #[test]
    fn the_nomad_section_has_nomads_keys_as_strings() {
        let s = NomadStats {
            leader: false,
            leader_addr: "127.0.0.1:4646".into(),
            bootstrap: false,
            known_regions: 1,
        }
        .to_stats();
        let want: BTreeMap<String, String> = [
            ("server", "true"),
            ("leader", "false"),
            ("leader_addr", "127.0.0.1:4646"),
            ("bootstrap", "false"),
            ("known_regions", "1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(s, want);
    }
}
