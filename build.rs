//! Rebuilds the crate when a migration or a file of `sql/` is added or
//! changed: `refinery`'s `embed_migrations!` (src/migrate.rs) reads
//! `migrations/` at compile time, and Cargo would otherwise not know to look
//! there again. The files of `sql/` are read with `include_str!` (the `sql!`
//! macro of src/db/mod.rs), which Cargo tracks on its own; watching the
//! directory also catches a file added or removed there.

fn main() {
    println!("cargo:rerun-if-changed=migrations");
    println!("cargo:rerun-if-changed=sql");
}
