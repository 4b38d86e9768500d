//! A `#[aegis]` mistake (on a struct): the .stderr beside this file is its error.
use aegis::prelude::*;

#[aegis]
struct Book;

fn main() {}
