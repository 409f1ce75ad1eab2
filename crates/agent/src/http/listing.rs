//! Nomad's list parameters over any list the agent answers: `prefix` (on the item's
//! id), `filter` (a go-bexpr expression over the item as Nomad's JSON shows it),
//! `reverse`, and pagination — `per_page` items from `next_token`, the key of the first
//! item of a page; the answer's `X-Nomad-NextToken` is the key of the first item of
//! the next page, absent on the last.

use serde::Serialize;

use super::error::ApiError;
use super::query::Params;
use schedstate_filter::Filter;

/// A page of a list and the token of the next one.
pub(crate) struct Page<T> {
    pub items: Vec<T>,
    pub next_token: Option<String>,
}

/// How a request asks its list to be cut.
pub(crate) struct Listing {
    prefix: Option<String>,
    per_page: Option<usize>,
    next_token: Option<String>,
    reverse: bool,
    filter: Option<Filter>,
}

impl Listing {
    /// The listing a request asks for.
    ///
    /// # Errors
    /// 400 for a filter that does not parse.
    pub(crate) fn of(p: &Params) -> Result<Listing, ApiError> {
        let filter = p
            .filter
            .as_deref()
            .map(|f| {
                f.parse::<Filter>().map_err(|e| {
                    ApiError::bad_request(format!("failed to read filter expression: {e}"))
                })
            })
            .transpose()?;
        Ok(Listing {
            prefix: p.prefix.clone().filter(|s| !s.is_empty()),
            per_page: p.per_page,
            next_token: p.next_token.clone(),
            reverse: p.reverse,
            filter,
        })
    }

    /// Cuts `items` — `(id, key, item)` in key order — as asked: `id` is what
    /// `prefix` matches, `key` the item's position for pagination (the id, or
    /// `namespace/id`).
    pub(crate) fn cut<T: Serialize>(
        &self,
        items: impl Iterator<Item = (String, String, T)>,
    ) -> Page<T> {
        let mut kept: Vec<(String, T)> = items
            .filter(|(id, _, _)| self.prefix.as_deref().is_none_or(|p| id.starts_with(p)))
            .filter(|(_, _, item)| {
                self.filter
                    .as_ref()
                    .is_none_or(|f| serde_json::to_value(item).is_ok_and(|v| f.matches(&v)))
            })
            .map(|(_, key, item)| (key, item))
            .collect();
        if self.reverse {
            kept.reverse();
        }
        if let Some(token) = &self.next_token {
            let start = kept
                .iter()
                .position(|(k, _)| {
                    if self.reverse {
                        k.as_str() <= token.as_str()
                    } else {
                        k.as_str() >= token.as_str()
                    }
                })
                .unwrap_or(kept.len());
            kept.drain(..start);
        }
        let mut next_token = None;
        if let Some(n) = self.per_page
            && kept.len() > n
        {
            next_token = Some(kept[n].0.clone());
            kept.truncate(n);
        }
        Page {
            items: kept.into_iter().map(|(_, item)| item).collect(),
            next_token,
        }
    }
}
