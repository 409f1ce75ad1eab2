//! The delete index of a table: the index of the last commit that removed one of its
//! rows, which a read that found nothing answers with.

use schedstate_engine::Key;

use crate::support::{Fixture, item, key};

#[test]
fn moves_on_deletes_only_and_per_table() {
    let fx = Fixture::new();
    let put = fx.put("a", "g1", 0);
    fx.put("b", "g1", 0);
    let v = fx.db.snapshot();
    assert_eq!(v.view().delete_index(fx.items), 0, "nothing deleted yet");
    assert!(v.view().table_index(fx.items) > put);

    let deleted = fx.del("a");
    // Updates, inserts and writes to another table leave it where it is.
    fx.put("b", "g2", 1);
    fx.put("c", "g1", 0);
    fx.put_other("o", 0);
    let now = fx.db.snapshot();
    let view = now.view();
    assert_eq!(view.delete_index(fx.items), deleted);
    assert!(view.table_index(fx.items) > deleted);
    assert_eq!(view.delete_index(fx.other), 0);

    // A delete of a row that is not there changes nothing, so it is no delete.
    fx.del("ghost");
    assert_eq!(fx.db.snapshot().view().delete_index(fx.items), deleted);
}

#[test]
fn a_row_inserted_and_deleted_in_one_transaction_is_no_delete() {
    let fx = Fixture::new();
    fx.put("a", "g1", 0);
    let items = fx.items;
    fx.write(|txn| {
        txn.insert(items, item("tmp", "g1", 0)).unwrap();
        txn.delete(items, &Key::str("tmp")).unwrap();
    });
    assert_eq!(fx.db.snapshot().view().delete_index(fx.items), 0);
    // A replaced and then deleted row that existed before is one.
    let index = fx.write(|txn| {
        txn.insert(items, item("a", "g2", 1)).unwrap();
        txn.delete(items, &key("a")).unwrap();
    });
    assert_eq!(fx.db.snapshot().view().delete_index(fx.items), index);
}

#[test]
fn a_restore_sets_it_to_the_table_index() {
    let fx = Fixture::new();
    fx.put("a", "g1", 0);
    fx.del("a");
    let mut txn = fx.db.begin_restore(50);
    txn.insert(fx.items, item("r", "g5", 7)).unwrap();
    txn.set_table_index(fx.items, 40);
    txn.commit().unwrap();
    let now = fx.db.snapshot();
    // Unknown after a restore: the table index, at least as late as any delete.
    assert_eq!(now.view().delete_index(fx.items), 40);
    assert_eq!(now.view().delete_index(fx.other), 0);
    let later = fx.del("r");
    assert_eq!(fx.db.snapshot().view().delete_index(fx.items), later);
}
