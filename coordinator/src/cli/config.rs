//! The coordinator configuration file (`--config FILE`, TOML): agents and TLS paths, and
//! for `surge matrix` the labels and custom `[[profile]]` tables.

use super::UsageError;
use crate::plan::matrix::ProfileSpec;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The file's keys.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct CoordinatorFile {
    #[serde(default)]
    pub agents: Vec<String>,
    pub tls_ca: Option<PathBuf>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub hardware: Option<String>,
    pub engine: Option<String>,
    pub cluster_label: Option<String>,
    #[serde(default, rename = "profile")]
    pub profiles: Vec<ProfileSpec>,
}

/// Reads a coordinator configuration file.
pub fn load_file(path: &Path) -> Result<CoordinatorFile, UsageError> {
    if !path.exists() {
        return Err(UsageError(format!("--config {}: file not found", path.display())));
    }
    let text = std::fs::read_to_string(path).map_err(|e| UsageError(format!("--config {}: {e}", path.display())))?;
    parse_text(&text).map_err(|e| UsageError(format!("--config {}: {e}", path.display())))
}

/// A configuration file's text (TOML), as [`load_file`] reads it.
pub fn parse_text(text: &str) -> Result<CoordinatorFile, config::ConfigError> {
    surge_core::tomlkeys::check(text).map_err(config::ConfigError::Message)?;
    config::Config::builder()
        .add_source(config::File::from_str(text, config::FileFormat::Toml))
        .build()
        .and_then(|c| c.try_deserialize::<CoordinatorFile>())
}
