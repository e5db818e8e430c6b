package gormfence

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/fencekit/fencekit/store"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/schema"
)

// beforeCreate sets the fence column of each created row to its token and makes an
// OnConflict upsert conditional on it.
func (p *Plugin) beforeCreate(db *gorm.DB) {
	stmt := db.Statement
	if db.Error != nil {
		return
	}
	field := p.fenceField(stmt)
	if field == nil {
		return
	}
	var rows []reflect.Value
	switch dest := stmt.Dest.(type) {
	case map[string]any:
		rows = []reflect.Value{reflect.ValueOf(stmt.Model)}
	case []map[string]any:
		rows = slices.Repeat([]reflect.Value{reflect.ValueOf(stmt.Model)}, len(dest))
	default:
		rows = rowsOf(stmt.ReflectValue)
	}
	if len(rows) == 0 {
		return
	}
	tokens, resource, ok, err := p.tokens(stmt, "create", rows)
	if err != nil {
		db.AddError(err)
		return
	}
	if !ok {
		return
	}
	setToken := func(m map[string]any, tok int64) map[string]any {
		m = maps.Clone(m)
		delete(m, field.Name)
		m[field.DBName] = tok
		return m
	}
	switch dest := stmt.Dest.(type) {
	case map[string]any:
		stmt.Dest = setToken(dest, tokens[0])
	case []map[string]any:
		ms := make([]map[string]any, len(dest))
		for i, m := range dest {
			ms[i] = setToken(m, tokens[i])
		}
		stmt.Dest = ms
	default:
		for i, row := range rows {
			if r := reflect.Indirect(row); r.Kind() == reflect.Struct && r.CanAddr() {
				db.AddError(field.Set(stmt.Context, r, tokens[i]))
			}
		}
	}
	keepColumn(stmt, field.DBName, field.Name)
	f := &fence{field: field, tokens: tokens, rows: rows, resource: resource}
	if c, ok := stmt.Clauses["ON CONFLICT"]; ok {
		if oc, ok := c.Expression.(clause.OnConflict); ok && !oc.DoNothing {
			col := clause.Column{Name: field.DBName}
			excluded := clause.Column{Table: "excluded", Name: field.DBName}
			if !oc.UpdateAll && !slices.ContainsFunc(oc.DoUpdates, func(a clause.Assignment) bool { return a.Column.Name == col.Name }) {
				oc.DoUpdates = append(slices.Clip(oc.DoUpdates), clause.Assignment{Column: col, Value: excluded})
			}
			// PostgreSQL and SQLite: ON CONFLICT … DO UPDATE SET … WHERE <table>.fence_token
			// <= excluded.fence_token. MySQL ignores this WHERE: mysqlOnConflict.
			oc.Where.Exprs = append(slices.Clip(oc.Where.Exprs),
				clause.Lte{Column: clause.Column{Table: clause.CurrentTable, Name: field.DBName}, Value: excluded})
			stmt.AddClause(oc)
			f.upsert = true
		}
	}
	setState(stmt, f)
}

// afterCreate finds the rows of a fenced upsert that a newer token refused: the
// upsert changed fewer rows than it was given (PostgreSQL, SQLite), or could have
// (MySQL counts unchanged rows as 0 and updated ones as 2). A row whose column is
// above its token makes the create fail with a StaleTokenError, and GORM's
// transaction roll back.
func (p *Plugin) afterCreate(db *gorm.DB) {
	stmt := db.Statement
	f := getState(stmt)
	if f == nil || !f.upsert || db.Error != nil || db.DryRun {
		return
	}
	n := int64(len(f.rows))
	mysql := db.Dialector.Name() == "mysql"
	if (!mysql && db.RowsAffected >= n) || (mysql && db.RowsAffected == 2*n) {
		return
	}
	oc, _ := stmt.Clauses["ON CONFLICT"].Expression.(clause.OnConflict)
	keys := make([]*schema.Field, 0, len(oc.Columns))
	for _, c := range oc.Columns {
		if kf := stmt.Schema.LookUpField(c.Name); kf != nil {
			keys = append(keys, kf)
		}
	}
	if len(oc.Columns) == 0 || len(keys) != len(oc.Columns) {
		keys = stmt.Schema.PrimaryFields
	}
	marks, err := readMarks(db, f, keys)
	if err != nil {
		db.AddError(err)
		return
	}
	for i, row := range f.rows {
		key, known := rowKey(stmt, keys, row)
		if !known {
			db.AddError(fmt.Errorf("gormfence: upsert into %s: cannot tell whether a newer token refused it: "+
				"the row has no value for its conflict columns", stmt.Table))
			return
		}
		if mark, ok := marks[key]; ok && mark > f.tokens[i] {
			resource := f.resource
			if resource == "" {
				resource = stmt.Table + "/" + key
			}
			db.AddError(&store.StaleTokenError{Resource: resource, Token: f.tokens[i], Mark: mark})
			return
		}
	}
	if !mysql {
		db.AddError(fmt.Errorf("gormfence: upsert into %s changed %d of %d rows, yet none holds a newer token",
			stmt.Table, db.RowsAffected, n))
	}
}

// readMarks reads the fence column of the rows of f by their key columns: the marks
// by key (rowKey's form).
func readMarks(db *gorm.DB, f *fence, keys []*schema.Field) (map[string]int64, error) {
	stmt := db.Statement
	names := make([]string, len(keys))
	cols := make([]clause.Column, len(keys))
	for i, k := range keys {
		names[i], cols[i] = k.DBName, clause.Column{Name: k.DBName}
	}
	var values [][]any
	for _, row := range f.rows {
		vals := make([]any, len(keys))
		for i, k := range keys {
			vals[i], _ = k.ValueOf(stmt.Context, reflect.Indirect(row))
		}
		values = append(values, vals)
	}
	column, in := schema.ToQueryValues("", names, values)
	selected := append(slices.Clip(cols), clause.Column{Name: f.field.DBName})
	rows, err := db.Session(&gorm.Session{NewDB: true, SkipHooks: true}).Table(stmt.Table).
		Clauses(clause.Select{Columns: selected}, clause.Where{Exprs: []clause.Expression{clause.IN{Column: column, Values: in}}}).
		Rows()
	if err != nil {
		return nil, fmt.Errorf("gormfence: upsert into %s: read the rows back: %w", stmt.Table, err)
	}
	defer rows.Close()
	marks := map[string]int64{}
	for rows.Next() {
		dest := make([]any, len(keys)+1)
		ptrs := make([]any, len(dest))
		for i := range dest {
			ptrs[i] = &dest[i]
		}
		var mark int64
		ptrs[len(keys)] = &mark
		if err := rows.Scan(ptrs...); err != nil {
			return nil, fmt.Errorf("gormfence: upsert into %s: read the rows back: %w", stmt.Table, err)
		}
		marks[joinKey(normalize(dest[:len(keys)]))] = mark
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("gormfence: upsert into %s: read the rows back: %w", stmt.Table, err)
	}
	return marks, nil
}

// rowKey returns row's key in readMarks' form, and false when a key field is zero.
func rowKey(stmt *gorm.Statement, keys []*schema.Field, row reflect.Value) (string, bool) {
	vals := make([]any, len(keys))
	for i, k := range keys {
		v, zero := k.ValueOf(stmt.Context, reflect.Indirect(row))
		if zero {
			return "", false
		}
		vals[i] = v
	}
	return joinKey(vals), true
}

// normalize turns the []byte a driver scans text into into strings, so that keys read
// back compare with the model's values.
func normalize(vals []any) []any {
	for i, v := range vals {
		if b, ok := v.([]byte); ok {
			vals[i] = string(b)
		}
	}
	return vals
}

// mysqlOnConflict wraps MySQL's builder of ON DUPLICATE KEY UPDATE, which has no WHERE:
// for a fenced upsert, each assignment becomes
//
//	col = IF(fence_token <= VALUES(fence_token), VALUES(col), col)
//
// and the fence column comes last, as GREATEST(fence_token, VALUES(fence_token)),
// since MySQL assigns left to right and later assignments see earlier ones. Other
// statements are built as before.
func mysqlOnConflict(next clause.ClauseBuilder) clause.ClauseBuilder {
	return func(c clause.Clause, b clause.Builder) {
		stmt, _ := b.(*gorm.Statement)
		oc, isOC := c.Expression.(clause.OnConflict)
		var f *fence
		if stmt != nil {
			f = getState(stmt)
		}
		if !isOC || f == nil || !f.upsert || oc.DoNothing || len(oc.DoUpdates) == 0 {
			if next != nil {
				next(c, b)
			} else {
				c.Build(b)
			}
			return
		}
		fc := clause.Column{Name: f.field.DBName}
		b.WriteString("ON DUPLICATE KEY UPDATE ")
		for _, a := range oc.DoUpdates {
			if a.Column.Name == fc.Name {
				continue
			}
			b.WriteQuoted(a.Column)
			b.WriteString("=IF(")
			b.WriteQuoted(fc)
			b.WriteString(" <= VALUES(")
			b.WriteQuoted(fc)
			b.WriteString("),")
			if v, ok := a.Value.(clause.Column); ok && strings.EqualFold(v.Table, "excluded") {
				v.Table = ""
				b.WriteString("VALUES(")
				b.WriteQuoted(v)
				b.WriteByte(')')
			} else {
				b.AddVar(b, a.Value)
			}
			b.WriteByte(',')
			b.WriteQuoted(a.Column)
			b.WriteString("),")
		}
		b.WriteQuoted(fc)
		b.WriteString("=GREATEST(")
		b.WriteQuoted(fc)
		b.WriteString(",VALUES(")
		b.WriteQuoted(fc)
		b.WriteString("))")
	}
}
