// Package gormfence fences GORM writes with the fencing token in the context: a
// plugin that makes every write of a model with a fence column conditional on the
// token, so that a lock holder whose lease lapsed cannot overwrite a newer holder's
// data.
//
//	db.Use(gormfence.New()) // the column: fence_token, or WithColumn
//	err := locker.Do(ctx, "order:7", func(ctx context.Context) error {
//		return db.WithContext(ctx).Model(&order).Updates(map[string]any{"status": "paid"}).Error
//	})
//	// errors.Is(err, store.ErrStaleToken): a newer holder has written; nothing was
//
// A model is fenced when its table has the fence column (a BIGINT, NOT NULL DEFAULT 0
// for existing rows; declare it as FenceToken int64 in the struct). Under a context
// that carries a token ([fencing.TokenFromContext], or [fencing.TokenFor] of the
// model's FenceResource() string method, for Locker.DoAll), the plugin
//
//   - adds "fence_token <= token" to the WHERE of Update, Updates, UpdateColumn,
//     UpdateColumns, Save and Delete, and sets the column to the token (a soft delete
//     too), whatever Select, Omit or zero values leave out;
//   - sets the column to each row's token on Create, and makes an OnConflict upsert
//     update only rows whose column admits the token (PostgreSQL and SQLite: ON
//     CONFLICT … DO UPDATE … WHERE; MySQL and MariaDB: each assignment of ON DUPLICATE
//     KEY UPDATE wrapped in IF(fence_token <= VALUES(fence_token), …));
//   - fails a statement that a newer token refused with an error matching
//     [store.ErrStaleToken] (a [*store.StaleTokenError]), and one that matched no row
//     because the row is missing with [gorm.ErrRecordNotFound]; GORM's default
//     transaction then rolls the statement back, and Save never falls back to its
//     unconditional upsert;
//   - fails a write of a fenced model under a context without a token with an error
//     matching [ErrNoToken], unless built with [AllowUnfenced].
//
// A single-row write costs what the unfenced one costs: one statement. The plugin
// reads the rows back only when a statement changed none, or could touch several
// (no primary key), to tell refused from missing rows, and after a fenced upsert on
// MySQL.
//
// Not fenced: raw SQL (db.Exec, db.Raw), statements without a model (db.Table(name)
// with a map), models without the column, and reads. A read that decides a write
// must be fenced too: run [Check] first in the transaction, which fences the whole
// transaction through a fence row ([store.Fences]), or write the row you read in the
// same transaction. A hard Delete removes the row and its mark: a stale holder can
// then create it again; prefer soft deletes (gorm.DeletedAt) for fenced models.
package gormfence
