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
    /// The directive grants or denies access (set by [`crate::access::classify`]).
    pub access: bool,
    /// The difference only refuses more than the original (a user whose
    /// hash weir cannot check is left out, so that user is refused).
    pub stricter: bool,
}

/// Every directive's outcome, in input order.
#[derive(Debug, Default, Clone)]
pub struct Report {
    pub items: Vec<Item>,
    /// How weir itself differs from the server whatever the config says
    /// (its own error pages, its retries): `(what, how)`, said once per
    /// import and not counted in the exit status, since no directive of
    /// the input is involved.
    pub baseline: Vec<(String, String)>,
    /// What makes the original server itself refuse the config (`nginx -t`
    /// fails): the import stops with the first, as `weir import` exit 1.
    pub refused: Vec<(Origin, String)>,
}

impl Report {
    fn push(&mut self, item: Item) {
        // A snippet included twice, or a server copied for each of its
        // names, says one thing once: the worst of what became of it, since
        // "mapped" must hold for every copy.
        match self
            .items
            .iter_mut()
            .find(|i| i.at == item.at && i.directive == item.directive)
        {
            Some(i) if rank(&item.outcome) > rank(&i.outcome) => *i = item,
            Some(i) if rank(&item.outcome) == rank(&i.outcome) && i.outcome != item.outcome => {
                // Two different reasons for one directive: both are true.
                let extra = reason(&item.outcome).to_string();
                match &mut i.outcome {
                    Outcome::Approximated(w) | Outcome::NoEquivalent(w) if !w.contains(&extra) => {
                        w.push_str("; ");
                        w.push_str(&extra);
                    }
                    _ => {}
                }
            }
            Some(_) => {}
            None => self.items.push(item),
        }
    }

    fn add(
        &mut self,
        at: &Origin,
        directive: String,
        to: String,
        outcome: Outcome,
        stricter: bool,
    ) {
        self.push(Item {
            at: at.clone(),
            directive,
            to,
            outcome,
            access: false,
            stricter,
        });
    }

    pub fn mapped(&mut self, at: &Origin, directive: impl Into<String>, to: impl Into<String>) {
        self.add(at, directive.into(), to.into(), Outcome::Mapped, false);
    }

    pub fn approx(
        &mut self,
        at: &Origin,
        directive: impl Into<String>,
        to: impl Into<String>,
        why: impl Into<String>,
    ) {
        let outcome = Outcome::Approximated(why.into());
        self.add(at, directive.into(), to.into(), outcome, false);
    }

    /// Approximated in a way that never lets through a request the
    /// original refuses (a challenge's wording, a refusal's status).
    pub fn approx_closed(
        &mut self,
        at: &Origin,
        directive: impl Into<String>,
        to: impl Into<String>,
        why: impl Into<String>,
    ) {
        let outcome = Outcome::Approximated(why.into());
        self.add(at, directive.into(), to.into(), outcome, true);
    }

    pub fn none(&mut self, at: &Origin, directive: impl Into<String>, why: impl Into<String>) {
        let outcome = Outcome::NoEquivalent(why.into());
        self.add(at, directive.into(), String::new(), outcome, false);
    }

    /// Left out, and what weir does instead refuses more than the original.
    pub fn stricter(&mut self, at: &Origin, directive: impl Into<String>, why: impl Into<String>) {
        let outcome = Outcome::NoEquivalent(why.into());
        self.add(at, directive.into(), String::new(), outcome, true);
    }

    /// The original server refuses the config here, for this reason.
    pub fn refuse(&mut self, at: &Origin, why: impl Into<String>) {
        self.refused.push((at.clone(), why.into()));
    }

    /// A difference of weir's own, not of any directive (see [`Report::baseline`]).
    pub fn baseline(&mut self, what: impl Into<String>, how: impl Into<String>) {
        let what = what.into();
        if !self.baseline.iter().any(|(w, _)| *w == what) {
            self.baseline.push((what, how.into()));
        }
    }

    /// Whether an access directive was approximated or dropped in a way
    /// that may let through what the original refused.
    pub fn opens_access(&self) -> bool {
        self.items
            .iter()
            .any(|i| i.access && !i.stricter && i.outcome != Outcome::Mapped)
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

    /// 0 when everything mapped; 4 when a directive that grants or denies
    /// access was approximated or dropped in a way that may open it; 3 when
    /// anything else differs (an access rule that only refuses more included).
    pub fn exit_code(&self) -> u8 {
        if self.opens_access() {
            4
        } else if self.items.iter().all(|i| i.outcome == Outcome::Mapped) {
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

/// How far an outcome is from "the same".
fn rank(o: &Outcome) -> u8 {
    match o {
        Outcome::Mapped => 0,
        Outcome::Approximated(_) => 1,
        Outcome::NoEquivalent(_) => 2,
    }
}

fn reason(o: &Outcome) -> &str {
    match o {
        Outcome::Mapped => "",
        Outcome::Approximated(w) | Outcome::NoEquivalent(w) => w,
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
                if i.access && i.outcome != Outcome::Mapped {
                    write!(
                        f,
                        " [access{}]",
                        if i.stricter { ", kept closed" } else { "" }
                    )?;
                }
                if !i.to.is_empty() {
                    write!(f, " -> {}", i.to)?;
                }
                if !why.is_empty() {
                    write!(f, ": {why}")?;
                }
                writeln!(f)?;
            }
        }
        if !self.baseline.is_empty() {
            writeln!(
                f,
                "weir's own behaviour, whatever the config (docs/import.md):"
            )?;
            for (what, how) in &self.baseline {
                writeln!(f, "  {what}: {how}")?;
            }
        }
        write!(
            f,
            "{} mapped, {} approximated, {} without equivalent",
            counts[2], counts[0], counts[1]
        )
    }
}
