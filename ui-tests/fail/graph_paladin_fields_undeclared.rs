//! A `graph!` mistake (paladin fields undeclared): the .stderr beside this file is its error.
use aegis::prelude::*;

fn main() {
    let _ = graph! {
        schema { question: LastWrite }
        nodes {
            writer = paladin(aegis::paladin::Paladin::new("Writer"), "Answer {qestion} in {locale}" -> answer),
            reader = paladin(aegis::paladin::Paladin::new("Reader"), "Read {question" -> question),
        }
        edges { START -> writer -> reader -> END }
    };
}
