//! Nomad's list parameters over any list the agent answers: `prefix` (on the item's
//! id), `filter` (a go-bexpr expression over the item as Nomad's JSON shows it),
//! `reverse`, and pagination — `per_page` items from `next_token`, the key of the first
//! item of a page; the answer's `X-Nomad-NextToken` is the key of the first item of
//! the next page, absent on the last.

use serde::Serialize;

use super::blocking::over_budget;
use super::error::ApiError;
use super::query::Params;
use crate::service::Budget;
use schedstate_filter::Filter;

/// How many items a list goes through between two looks at its budget (a look is a
/// clock read: cheap, but not free per item).
const BUDGET_EVERY: usize = 32;

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

    /// Cuts `items` — `(id, key, row)` in key order — as asked: `id` is what
    /// `prefix` matches, `key` the row's position for pagination (the id, or
    /// `namespace/id`); the filter sees each row as `shown` makes it (the item the
    /// answer shows). Checks `budget` every [`BUDGET_EVERY`] items; in key order
    /// with `per_page`, stops once the page and the next page's first item are
    /// found, so a page costs what it skips and holds, not the whole table. The page
    /// holds the rows themselves (shared, a pointer each): the answer's items are
    /// made from them as it is written (`list_body.rs`).
    ///
    /// # Errors
    /// 422 `BudgetExceeded` when the budget is spent before the list is cut.
    pub(crate) fn cut<R, T: Serialize>(
        &self,
        budget: &Budget,
        items: impl Iterator<Item = (String, String, R)>,
        shown: impl Fn(&R) -> T,
    ) -> Result<Page<R>, ApiError> {
        let forward_page = if self.reverse { None } else { self.per_page };
        let mut kept: Vec<(String, R)> = Vec::new();
        for (seen, (id, key, item)) in items.enumerate() {
            if seen % BUDGET_EVERY == BUDGET_EVERY - 1 && budget.spent() {
                return Err(over_budget(budget, seen + 1));
            }
            if self.prefix.as_deref().is_some_and(|p| !id.starts_with(p)) {
                continue;
            }
            // In key order, what comes before the page's token is not read further.
            if forward_page.is_some()
                && self.next_token.as_deref().is_some_and(|t| key.as_str() < t)
            {
                continue;
            }
            if let Some(f) = &self.filter
                && !serde_json::to_value(shown(&item)).is_ok_and(|v| f.matches(&v))
            {
                continue;
            }
            kept.push((key, item));
            if forward_page.is_some_and(|n| kept.len() > n) {
                break;
            }
        }
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
        Ok(Page {
            items: kept.into_iter().map(|(_, item)| item).collect(),
            next_token,
        })
    }
}
