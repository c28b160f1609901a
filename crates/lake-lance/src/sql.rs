//! The rule for SQL text a caller hands the engine: a predicate (`delete`, `update`'s `WHERE`,
//! a scan's filter) or an expression (`update`'s `SET column = expression`) is exactly one SQL
//! expression, nothing before or after it.
//!
//! Lance parses such text by wrapping it in a statement (`SELECT 1 FROM t WHERE <predicate>`,
//! `SELECT <expression> FROM t`, lance-datafusion 14 `sql.rs`) and keeping the first statement
//! and its first selected item: `x; DROP TABLE t` deletes the rows matching `x` and the rest
//! is silently dropped, as is `b` in `a, b`. An operator who wrote more than one expression
//! meant something else, so the engine refuses such text before anything runs. The check parses
//! with the SQL parser Lance links (sqlparser, through `lance::deps::datafusion`) and Lance's
//! own dialect (the generic dialect with backtick-quoted identifiers, and `==` read as `=`):
//! the text must parse as one expression that ends where the text ends.

use crate::error::LanceEngineError;
use lance::deps::datafusion::sql::sqlparser::dialect::{Dialect, GenericDialect};
use lance::deps::datafusion::sql::sqlparser::parser::Parser;
use lance::deps::datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use std::any::TypeId;

/// Lance 14's SQL dialect (lance-datafusion `sql.rs`, `LanceDialect`, which is private): the
/// generic dialect whose delimited identifiers are quoted with backticks.
#[derive(Debug, Default)]
struct LanceDialect(GenericDialect);

impl Dialect for LanceDialect {
    fn dialect(&self) -> TypeId {
        self.0.dialect()
    }

    fn is_identifier_start(&self, ch: char) -> bool {
        self.0.is_identifier_start(ch)
    }

    fn is_identifier_part(&self, ch: char) -> bool {
        self.0.is_identifier_part(ch)
    }

    fn is_delimited_identifier_start(&self, ch: char) -> bool {
        ch == '`'
    }

    fn supports_bitwise_shift_operators(&self) -> bool {
        self.0.supports_bitwise_shift_operators()
    }
}

/// Why `text` is not exactly one SQL expression, or `None` when it is.
fn not_one_expression(text: &str) -> Option<String> {
    let dialect = LanceDialect::default();
    let tokens = match Tokenizer::new(&dialect, text).tokenize() {
        Ok(tokens) => tokens,
        Err(e) => return Some(e.to_string()),
    };
    // Lance reads `==` as `=` (two adjacent `=` tokens become one).
    let mut merged: Vec<Token> = Vec::with_capacity(tokens.len());
    for token in tokens {
        if token == Token::Eq && merged.last() == Some(&Token::Eq) {
            continue;
        }
        merged.push(token);
    }
    let mut parser = Parser::new(&dialect).with_tokens(merged);
    if let Err(e) = parser.parse_expr() {
        return Some(e.to_string());
    }
    match parser.next_token().token {
        Token::EOF => None,
        Token::SemiColon => {
            Some("a `;` follows the expression (one statement per call; nothing after it is run)".into())
        }
        other => Some(format!("the expression ends before `{other}`")),
    }
}

/// Checks that `predicate` (a `WHERE` clause without `WHERE`) is exactly one SQL expression.
///
/// # Errors
/// [`LanceEngineError::InvalidInput`] naming the text and why (what follows the expression, or
/// the parser's error).
pub fn check_predicate(predicate: &str) -> Result<(), LanceEngineError> {
    check("predicate", predicate, "episode = 'a' AND path LIKE 'x/%'")
}

/// Checks that `expression` (the value of an assignment) is exactly one SQL expression.
///
/// # Errors
/// As [`check_predicate`].
pub fn check_expression(expression: &str) -> Result<(), LanceEngineError> {
    check("expression", expression, "upper(path)")
}

fn check(what: &str, text: &str, example: &str) -> Result<(), LanceEngineError> {
    match not_one_expression(text) {
        None => Ok(()),
        Some(why) => Err(LanceEngineError::InvalidInput(format!(
            "the {what} `{text}` is not one SQL expression: {why}. Write exactly one expression, such as `{example}`; nothing was run"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exactly_one_expression_is_accepted() {
        for ok in [
            "episode = 'Asia'",
            "a == b",
            "x",
            "`outer field`.`inner field` == 1",
            "episode = 'a; b'",
            "  n > 3  ",
            "n > 3 -- a comment",
            "file IS NULL OR path LIKE 'x/%'",
            "random() < 0.5",
            "CASE WHEN n > 1 THEN 'a' ELSE 'b' END",
            "upper(path)",
            "NULL",
        ] {
            assert!(check_predicate(ok).is_ok(), "{ok}: {:?}", not_one_expression(ok));
        }
        for bad in [
            "x; DROP TABLE t",
            "episode = 'a';",
            "episode = 'a'; episode = 'b'",
            "a, b",
            "x GROUP BY y",
            "x ORDER BY y",
            "x LIMIT 1",
            "x) OR (y",
            "a AS b",
            "",
            "   ",
            "x UNION SELECT 1",
        ] {
            let err = check_predicate(bad).unwrap_err();
            assert!(err.to_string().contains("is not one SQL expression"), "{bad}: {err}");
            assert!(check_expression(bad).is_err(), "{bad}");
        }
    }
}
