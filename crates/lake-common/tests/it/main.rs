//! Integration tests of lake-common (one binary per crate).
mod corpus;
mod delta_props;
mod reflog;
mod uri_props;
