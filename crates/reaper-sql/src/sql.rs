//! A statement under construction: text and the values bound to it, with the
//! dialect's placeholders (`?` or `$n`) rendered as values are bound, so that
//! every statement is written once for both databases and no placeholder is
//! ever numbered by hand.

use chrono::NaiveDateTime;
use std::marker::PhantomData;

/// How a database writes the placeholder of a bound value: all a statement
/// needs of its dialect while it is built.
pub(crate) trait Placeholders {
    /// Writes the placeholder of the `n`-th bound value (from 1).
    fn placeholder(n: usize, out: &mut String);
}

/// A value bound to a statement.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Arg {
    I32(i32),
    I64(i64),
    Text(Option<String>),
    Time(NaiveDateTime),
    /// Arrays (`UNNEST`) exist on PostgreSQL only.
    I32s(Vec<i32>),
    I64s(Vec<i64>),
    Texts(Vec<Option<String>>),
    Times(Vec<Option<NaiveDateTime>>),
}

impl From<i32> for Arg {
    fn from(v: i32) -> Arg {
        Arg::I32(v)
    }
}

impl From<i64> for Arg {
    fn from(v: i64) -> Arg {
        Arg::I64(v)
    }
}

impl From<&i64> for Arg {
    fn from(v: &i64) -> Arg {
        Arg::I64(*v)
    }
}

impl From<Option<String>> for Arg {
    fn from(v: Option<String>) -> Arg {
        Arg::Text(v)
    }
}

impl From<&str> for Arg {
    fn from(v: &str) -> Arg {
        Arg::Text(Some(v.to_string()))
    }
}

impl From<NaiveDateTime> for Arg {
    fn from(v: NaiveDateTime) -> Arg {
        Arg::Time(v)
    }
}

/// One statement for dialect `D` (run through the dialect's connection:
/// see `dialect`).
#[derive(Debug)]
pub(crate) struct Sql<D> {
    text: String,
    args: Vec<Arg>,
    persistent: bool,
    _dialect: PhantomData<fn() -> D>,
}

impl<D: Placeholders> Sql<D> {
    pub fn new(text: impl Into<String>) -> Self {
        Sql {
            text: text.into(),
            args: Vec::new(),
            persistent: true,
            _dialect: PhantomData,
        }
    }

    /// Appends statement text (identifiers from `schema` and constants only,
    /// never input: values are bound).
    pub fn push(&mut self, text: &str) -> &mut Self {
        self.text.push_str(text);
        self
    }

    /// Binds a value, writing its placeholder.
    pub fn bind(&mut self, v: impl Into<Arg>) -> &mut Self {
        self.args.push(v.into());
        D::placeholder(self.args.len(), &mut self.text);
        self
    }

    /// Binds values as a comma-separated list (for `IN (…)` and `VALUES (…)`).
    pub fn bind_list<T: Into<Arg>>(&mut self, vs: impl IntoIterator<Item = T>) -> &mut Self {
        for (k, v) in vs.into_iter().enumerate() {
            if k > 0 {
                self.text.push(',');
            }
            self.bind(v);
        }
        self
    }

    /// Writes integers as a comma-separated list of literals: an id list
    /// needs no placeholders (a number cannot carry SQL), and a statement
    /// without any runs as plain text on MySQL, saving the prepare round
    /// trip and the per-value encoding of a list thousands long.
    pub fn push_ints(&mut self, vs: impl IntoIterator<Item = i64>) -> &mut Self {
        use std::fmt::Write;
        for (k, v) in vs.into_iter().enumerate() {
            if k > 0 {
                self.text.push(',');
            }
            let _ = write!(self.text, "{v}");
        }
        self
    }

    /// A one-off statement (its text varies, e.g. with a placeholder count):
    /// not worth a prepared-statement cache entry.
    pub fn one_off(&mut self) -> &mut Self {
        self.persistent = false;
        self
    }

    #[cfg(test)]
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Text, values and whether to keep it prepared: for the dialect that runs it.
    pub fn into_parts(self) -> (String, Vec<Arg>, bool) {
        (self.text, self.args, self.persistent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialect::{Dialect, MySql, Postgres};

    fn build<D: Dialect>() -> Sql<D> {
        let mut q = Sql::<D>::new("UPDATE t SET state = ");
        q.bind(6).push(" WHERE id IN (").bind_list([1i64, 2, 3]);
        q.push(") AND host ")
            .push(D::NULL_SAFE_EQ)
            .push(" ")
            .bind(Some("h".to_string()));
        q
    }

    #[test]
    fn placeholders_follow_the_binds() {
        assert_eq!(
            build::<MySql>().text(),
            "UPDATE t SET state = ? WHERE id IN (?,?,?) AND host <=> ?"
        );
        assert_eq!(
            build::<Postgres>().text(),
            "UPDATE t SET state = $1 WHERE id IN ($2,$3,$4) AND host IS NOT DISTINCT FROM $5"
        );
        let (_, args, persistent) = build::<Postgres>().into_parts();
        assert_eq!(args.len(), 5);
        assert_eq!(args[1], Arg::I64(1));
        assert!(persistent);
    }

    #[test]
    fn an_id_list_of_literals_binds_nothing() {
        let mut q = Sql::<MySql>::new("SELECT id FROM t WHERE id IN (");
        q.push_ints([3, -1, i64::MAX]).push(")").one_off();
        assert_eq!(
            q.text(),
            format!("SELECT id FROM t WHERE id IN (3,-1,{})", i64::MAX)
        );
        let (_, args, persistent) = q.into_parts();
        assert!(args.is_empty());
        assert!(!persistent);
    }
}
