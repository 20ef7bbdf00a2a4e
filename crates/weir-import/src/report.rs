//! What the import did with each directive: mapped, approximated (how it
//! differs) or without an equivalent (why, and what to do instead), printed
//! on stderr by `weir import` and checked by the tests.

use std::fmt;

use crate::error::Origin;

/// What became of one directive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// weir does the same: `to` names where.
    Mapped,
    /// weir does nearly the same; the text says what differs.
    Approximated(String),
    /// Left out; the text says why and what to do instead.
    NoEquivalent(String),
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub at: Origin,
    /// The directive as written (`proxy_pass http://app/`).
    pub directive: String,
    /// Where it went in weir.toml (`site "example.com:80" route /api/ proxy`), or "".
    pub to: String,
    pub outcome: Outcome,
}

/// Every directive's outcome, in input order.
#[derive(Debug, Default, Clone)]
pub struct Report {
    pub items: Vec<Item>,
}

impl Report {
    fn push(&mut self, item: Item) {
        // A snippet included twice, or a server copied for each of its
        // names, says the same thing once.
        if !self.items.iter().any(|i| {
            i.at == item.at
                && i.directive == item.directive
                && std::mem::discriminant(&i.outcome) == std::mem::discriminant(&item.outcome)
        }) {
            self.items.push(item);
        }
    }

    pub fn mapped(&mut self, at: &Origin, directive: impl Into<String>, to: impl Into<String>) {
        self.push(Item {
            at: at.clone(),
            directive: directive.into(),
            to: to.into(),
            outcome: Outcome::Mapped,
        });
    }

    pub fn approx(
        &mut self,
        at: &Origin,
        directive: impl Into<String>,
        to: impl Into<String>,
        why: impl Into<String>,
    ) {
        self.push(Item {
            at: at.clone(),
            directive: directive.into(),
            to: to.into(),
            outcome: Outcome::Approximated(why.into()),
        });
    }

    pub fn none(&mut self, at: &Origin, directive: impl Into<String>, why: impl Into<String>) {
        self.push(Item {
            at: at.clone(),
            directive: directive.into(),
            to: String::new(),
            outcome: Outcome::NoEquivalent(why.into()),
        });
    }

    pub fn approximated(&self) -> impl Iterator<Item = &Item> {
        self.items
            .iter()
            .filter(|i| matches!(i.outcome, Outcome::Approximated(_)))
    }

    pub fn dropped(&self) -> impl Iterator<Item = &Item> {
        self.items
            .iter()
            .filter(|i| matches!(i.outcome, Outcome::NoEquivalent(_)))
    }

    /// 0 when everything mapped, 3 when something was approximated or dropped.
    pub fn exit_code(&self) -> u8 {
        if self.items.iter().all(|i| i.outcome == Outcome::Mapped) {
            0
        } else {
            3
        }
    }

    /// The first item whose directive starts with `prefix` (for tests).
    pub fn find(&self, prefix: &str) -> Option<&Item> {
        self.items.iter().find(|i| i.directive.starts_with(prefix))
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        type Pick = fn(&Outcome) -> Option<&str>;
        let groups: [(&str, Pick); 3] = [
            ("approximated (weir differs as said)", |o| match o {
                Outcome::Approximated(w) => Some(w.as_str()),
                _ => None,
            }),
            ("no equivalent (left out)", |o| match o {
                Outcome::NoEquivalent(w) => Some(w.as_str()),
                _ => None,
            }),
            ("mapped", |o| match o {
                Outcome::Mapped => Some(""),
                _ => None,
            }),
        ];
        let mut counts = [0usize; 3];
        for (n, (title, pick)) in groups.iter().enumerate() {
            let items: Vec<(&Item, &str)> = self
                .items
                .iter()
                .filter_map(|i| pick(&i.outcome).map(|w| (i, w)))
                .collect();
            counts[n] = items.len();
            if items.is_empty() {
                continue;
            }
            writeln!(f, "{title}:")?;
            for (i, why) in items {
                write!(f, "  {}: {}", i.at, i.directive)?;
                if !i.to.is_empty() {
                    write!(f, " -> {}", i.to)?;
                }
                if !why.is_empty() {
                    write!(f, ": {why}")?;
                }
                writeln!(f)?;
            }
        }
        write!(
            f,
            "{} mapped, {} approximated, {} without equivalent",
            counts[2], counts[0], counts[1]
        )
    }
}
