//! Update through the engine: `UPDATE table SET col = expr, ... WHERE predicate`.
//!
//! Before Lance commits, the engine reads the rows the predicate matches at the version the
//! update reads: the references the assigned reference columns will hold (their expressions,
//! cast to the column's type as Lance's update casts them). Every managed object among them that
//! the matched rows did not already reference passes the publication guard. The update then runs
//! with no conflict retry (a retry would evaluate against a newer version than the one checked).
//! That check is one filtered scan (the matched rows' assigned values and reference columns),
//! replaced by a scan for one matching row when no reference column is assigned or only the
//! literal `NULL` (no reference can then be new; Lance's update commits a version even when no
//! row matches).
//!
//! The predicate and every expression must each be exactly one SQL expression
//! ([`crate::sql`]), and the values the assigned reference columns get are new references: one
//! inside the lake root must be a managed key (`lake_common::managed`).
//!
//! The update runs inside Lance's own call through the write protocol's commit handler
//! (`crate::commit`): right before its manifest write, the write intent names those new
//! references (GC keeps them until the version is journaled or proven never to land) and the
//! publication guard checks them.
//!
//! The journal entry is computed after the commit from the two manifests
//! (`crate::version_diff`), never from the check: an expression or predicate need not evaluate
//! the same way twice (`random()`), so only what Lance wrote is journaled. If the committed
//! version references an object the check did not see and would have refused, the entry is still
//! written (the journal stays exact, so GC keeps the object) and the call fails with
//! [`LanceEngineError::CommittedUnchecked`] naming the version (the protocol checks what the
//! update announced as expected: `crate::commit`).

use crate::commit::change::{Adds, Change, InLanceCall, Journal, Made};
use crate::engine::{CommitOutcome, LanceEngine};
use crate::error::LanceEngineError;
use crate::scan::{reference_columns, writable_columns};
use arrow_array::RecordBatch;
use arrow_schema::Schema;
use futures::TryStreamExt;
use lake_common::intent::IntentOperation;
use lake_common::{ObjectIdentity, ReferenceColumns, ReferenceCounts};
use lance::dataset::UpdateBuilder;
use lance::Dataset;
use std::sync::Arc;

/// One assignment of an update: a top-level column and a Lance SQL expression over the row as it
/// was before the update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// The column set.
    pub column: String,
    /// Its new value, as a Lance SQL expression (`NULL`, `other_column`, a literal, ...).
    pub expression: String,
}

impl std::str::FromStr for Assignment {
    type Err = LanceEngineError;

    /// Parses `COLUMN=EXPRESSION` (the first `=` separates them).
    ///
    /// # Errors
    /// [`LanceEngineError::InvalidInput`] without an `=` or with an empty column or expression.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once('=') {
            Some((column, expression)) if !column.trim().is_empty() && !expression.trim().is_empty() => {
                Ok(Assignment { column: column.trim().to_string(), expression: expression.trim().to_string() })
            }
            _ => Err(LanceEngineError::InvalidInput(format!(
                "`{s}` is not an assignment; write COLUMN=EXPRESSION, e.g. `label='cat'` or `file=NULL`"
            ))),
        }
    }
}

impl LanceEngine {
    /// Sets `assignments` on the rows of `table` matching `predicate` (Lance SQL; every row when
    /// `None`) as one new version (see the module documentation). Returns `None` when no row
    /// matched (no new version).
    ///
    /// # Errors
    /// Before the commit (nothing committed): [`LanceEngineError::InvalidInput`] for no
    /// assignment, a column assigned twice, or a predicate or expression that is not one SQL
    /// expression; [`LanceEngineError::UnreadableTable`]; [`LanceEngineError::Location`] when an
    /// expression gives a reference column a value that is not a valid new reference;
    /// [`LanceEngineError::Guard`] when a newly referenced managed object is too old to publish;
    /// Lance errors (an unknown column, an invalid expression, a conflicting concurrent write).
    /// After it, each naming the committed version: [`LanceEngineError::Unjournaled`],
    /// [`LanceEngineError::CommittedUnchecked`], sidecar and registry errors.
    /// [`LanceEngineError::NotCommitted`] / [`LanceEngineError::CommitUncertain`] when the commit
    /// failed after its manifest write was sent (see [`LanceEngine::append`]).
    pub async fn update(
        &self,
        table: &str,
        assignments: &[Assignment],
        predicate: Option<&str>,
    ) -> Result<Option<CommitOutcome>, LanceEngineError> {
        if assignments.is_empty() {
            return Err(LanceEngineError::InvalidInput("an update needs at least one COLUMN=EXPRESSION".into()));
        }
        for (i, a) in assignments.iter().enumerate() {
            if assignments[..i].iter().any(|b| b.column == a.column) {
                return Err(LanceEngineError::InvalidInput(format!("column `{}` is assigned twice", a.column)));
            }
            crate::sql::check_expression(&a.expression)?;
        }
        if let Some(p) = predicate {
            crate::sql::check_predicate(p)?;
        }
        let started = std::time::Instant::now();
        let ds = self.open(table).await?;
        writable_columns(&ds, table)?;
        let before = ds.version().version;
        let opened = started.elapsed();

        // One filtered scan (only when a reference column is assigned): the matched rows, the
        // references their assigned columns will hold, and those they hold now.
        let checked = self.checked_rows(&ds, table, assignments, predicate).await?;
        // Lance's update commits a version even when no row matches: when the check did not
        // count the matched rows, look for one (a scan that stops at the first).
        let matched = match checked.matched {
            Some(matched) => matched > 0,
            None => any_row_matches(&ds, table, predicate).await?,
        };
        if !matched {
            return Ok(None);
        }
        let (added, before_all) = (checked.added, checked.before);
        // Objects the matched rows already referenced (in any reference column) stay live through
        // the update; only the others are new to these rows: the intent names them and the guard
        // checks them.
        let fresh: Vec<ObjectIdentity> =
            added.iter().map(|(identity, _)| identity).filter(|id| before_all.get(id) == 0).cloned().collect();
        let checked_at = started.elapsed();
        let name = table.to_string();
        let predicate = predicate.map(str::to_string);
        let assignments = assignments.to_vec();
        let run: InLanceCall = Box::new(move |ds| {
            Box::pin(async move {
                let lance_err = |source| LanceEngineError::Lance { table: name.clone(), action: "update", source };
                let mut builder = UpdateBuilder::new(Arc::new(ds));
                if let Some(p) = &predicate {
                    builder = builder.update_where(p).map_err(lance_err)?;
                }
                for a in &assignments {
                    builder = builder.set(&a.column, &a.expression).map_err(lance_err)?;
                }
                // No conflict retry: a retry would evaluate against a newer version than the one
                // checked.
                let job = builder.conflict_retries(0).build().map_err(lance_err)?;
                let result = job.execute().await.map_err(lance_err)?;
                Ok(Made { dataset: Arc::unwrap_or_clone(result.new_dataset), rows: result.rows_updated })
            })
        });
        // What the check saw: the values assigned, and what the matched rows held.
        let expected = added.iter().chain(before_all.iter()).map(|(identity, _)| identity.clone()).collect();
        let adds = Adds::identities(IntentOperation::Update, before, fresh.clone(), fresh).expecting(expected);
        // On the version checked.
        let change = Change::in_lance(table, "update", table, Some(before), Journal::Manifests, run).adding(adds);
        let committed = self.commit(change).await?;
        if committed.unchanged {
            return Ok(None);
        }
        tracing::debug!(
            table,
            version = committed.version,
            references_added = committed.added,
            references_removed = committed.removed,
            open_s = opened.as_secs_f64(),
            check_s = (checked_at - opened).as_secs_f64(),
            commit_s = (started.elapsed() - checked_at).as_secs_f64(),
            "update committed and journaled"
        );
        Ok(Some(committed.outcome(table, committed.rows)))
    }

    /// The rows matching `predicate` as the update will read them, by one filtered scan of
    /// `ds` projecting the assigned reference columns' expressions (cast to the columns' types
    /// as Lance's update casts them) and every reference column as stored. No scan (and
    /// `matched` unknown) when no reference column is assigned, or only the literal `NULL`: no
    /// reference can then be new (each rewritten row holds a subset of its old references).
    async fn checked_rows(
        &self,
        ds: &Dataset,
        table: &str,
        assignments: &[Assignment],
        predicate: Option<&str>,
    ) -> Result<CheckedRows, LanceEngineError> {
        let all = reference_columns(ds, table)?;
        let stored = Schema::from(ds.schema());
        let names = all.names();
        // A reference column set to the literal NULL gets no reference: nothing to check.
        let assigned: Vec<&Assignment> = assignments
            .iter()
            .filter(|a| names.contains(&a.column) && !a.expression.trim().eq_ignore_ascii_case("null"))
            .collect();
        if assigned.is_empty() {
            return Ok(CheckedRows { matched: None, added: ReferenceCounts::new(), before: ReferenceCounts::new() });
        }
        let location_err = |source| LanceEngineError::Location { table: table.into(), source };
        let fields: Vec<_> = assigned.iter().filter_map(|a| stored.field_with_name(&a.column).ok().cloned()).collect();
        let subset = Arc::new(Schema::new(fields));
        // The assigned values are new references.
        let columns = ReferenceColumns::from_stored_schema(&subset).map_err(location_err)?.for_new_references();
        let aliases: Vec<String> = (0..assigned.len()).map(|i| format!("_lake_assigned_{i}")).collect();
        let mut projection: Vec<(&str, &str)> =
            aliases.iter().zip(&assigned).map(|(alias, a)| (alias.as_str(), a.expression.as_str())).collect();
        projection.extend(names.iter().map(|n| (n.as_str(), n.as_str())));
        let lance_err = |source| LanceEngineError::Lance { table: table.into(), action: "update", source };
        let mut scanner = ds.scan();
        scanner.project_with_transform(&projection).map_err(lance_err)?;
        if let Some(p) = predicate {
            scanner.filter(p).map_err(lance_err)?;
        }
        let mut stream = scanner.try_into_stream().await.map_err(lance_err)?;
        let mut checked =
            CheckedRows { matched: Some(0), added: ReferenceCounts::new(), before: ReferenceCounts::new() };
        while let Some(batch) = stream.try_next().await.map_err(lance_err)? {
            let cast = subset
                .fields()
                .iter()
                .zip(batch.columns())
                .map(|(field, column)| arrow_cast::cast(column, field.data_type()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| {
                    LanceEngineError::InvalidInput(format!(
                        "table `{table}`: an assigned expression does not give its reference column's type: {e}"
                    ))
                })?;
            let values = RecordBatch::try_new(subset.clone(), cast).map_err(|e| {
                LanceEngineError::InvalidInput(format!(
                    "table `{table}`: the assigned values do not fit the columns: {e}"
                ))
            })?;
            columns.visit(&values, self.store().root(), |id| checked.added.add(id, 1)).map_err(location_err)?;
            all.visit(&batch, self.store().root(), |id| checked.before.add(id, 1))
                .map_err(|source| LanceEngineError::Unreadable { table: table.into(), source })?;
            checked.matched = checked.matched.map(|m| m + batch.num_rows() as u64);
        }
        Ok(checked)
    }
}

/// Whether a row of `ds` matches `predicate` (every row when `None`): a scan of the predicate's
/// columns limited to one row, which Lance stops at the first match.
///
/// # Errors
/// Lance errors (an unknown column, an invalid predicate).
async fn any_row_matches(ds: &Dataset, table: &str, predicate: Option<&str>) -> Result<bool, LanceEngineError> {
    let lance_err = |source| LanceEngineError::Lance { table: table.into(), action: "find a matching row", source };
    let Some(p) = predicate else {
        return Ok(ds.count_rows(None).await.map_err(lance_err)? > 0);
    };
    let mut scanner = ds.scan();
    scanner.project::<&str>(&[]).map_err(lance_err)?;
    scanner.with_row_id();
    scanner.filter(p).map_err(lance_err)?;
    scanner.limit(Some(1), None).map_err(lance_err)?;
    let mut stream = scanner.try_into_stream().await.map_err(lance_err)?;
    while let Some(batch) = stream.try_next().await.map_err(lance_err)? {
        if batch.num_rows() > 0 {
            return Ok(true);
        }
    }
    Ok(false)
}

/// What the rows an update matches hold before it and will hold after it.
struct CheckedRows {
    /// The rows matched; `None` when not counted (no reference column assigned).
    matched: Option<u64>,
    /// The references the assigned reference columns will hold (the expressions' values).
    added: ReferenceCounts,
    /// The references the matched rows hold now, in every reference column.
    before: ReferenceCounts,
}
