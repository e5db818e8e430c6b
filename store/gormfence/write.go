package gormfence

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/fencekit/fencekit/store"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// fenceCond is the plugin's own condition, "fence_token <= token", told apart from
// the statement's other conditions when the plugin reads the rows back.
type fenceCond struct{ clause.Lte }

// beforeUpdate fences Update, Updates, UpdateColumn(s) and the update of Save.
func (p *Plugin) beforeUpdate(db *gorm.DB) {
	f := p.fenceWrite(db, "update", false)
	if f == nil {
		return
	}
	stmt := db.Statement
	tok := f.tokens[0]
	switch dest := stmt.Dest.(type) {
	case map[string]any:
		m := maps.Clone(dest) // the caller's map is left as it was
		delete(m, f.field.Name)
		m[f.field.DBName] = tok
		stmt.Dest = m
		// GORM copies the map's values into the model; so does the column.
		if rv := stmt.ReflectValue; rv.Kind() == reflect.Struct && rv.CanAddr() {
			db.AddError(f.field.Set(stmt.Context, rv, tok))
		}
	default:
		stmt.SetColumn(f.field.DBName, tok, true)
	}
	keepColumn(stmt, f.field.DBName, f.field.Name)
}

// beforeDelete fences Delete; a soft delete also sets the column (softDeleteSet).
func (p *Plugin) beforeDelete(db *gorm.DB) {
	if f := p.fenceWrite(db, "delete", true); f != nil {
		f.softDelete = len(db.Statement.Schema.DeleteClauses) > 0 && !db.Statement.Unscoped
	}
}

// fenceWrite adds the fence condition to an update or delete of a fenced model and
// records the fence, which it returns; nil when the statement is not fenced or failed.
func (p *Plugin) fenceWrite(db *gorm.DB, op string, isDelete bool) *fence {
	stmt := db.Statement
	if db.Error != nil {
		return nil
	}
	field := p.fenceField(stmt)
	if field == nil {
		return nil
	}
	rows := rowsOf(stmt.ReflectValue)
	if len(rows) == 0 {
		rows = []reflect.Value{reflect.ValueOf(stmt.Model)}
	}
	tokens, resource, ok, err := p.tokens(stmt, op, rows)
	if err != nil {
		db.AddError(err)
		return nil
	}
	if !ok {
		return nil
	}
	for _, t := range tokens[1:] {
		if t != tokens[0] {
			db.AddError(invalid("gormfence: %s of %s: its rows carry different fencing tokens: write them one at a time", op, stmt.Table))
			return nil
		}
	}
	// GORM refuses an update or delete without conditions; the fence condition must
	// not stand in for them.
	if !hasConditions(stmt, isDelete) {
		db.AddError(gorm.ErrMissingWhereClause)
		return nil
	}
	key, single, _ := primaryKey(stmt, stmt.ReflectValue)
	f := &fence{field: field, tokens: tokens[:1], resource: resource, singleRow: single}
	if f.resource == "" {
		f.resource = stmt.Table
		if single {
			f.resource += "/" + joinKey(key)
		}
	}
	addCondition(stmt, fenceCond{clause.Lte{Column: clause.Column{Table: clause.CurrentTable, Name: field.DBName}, Value: tokens[0]}})
	setState(stmt, f)
	return f
}

// hasConditions reports whether GORM would find a WHERE for the statement: its own
// conditions, a primary key on the model (or, for a delete, on the model given to
// Model), or AllowGlobalUpdate.
func hasConditions(stmt *gorm.Statement, isDelete bool) bool {
	if stmt.DB.AllowGlobalUpdate {
		return true
	}
	if c, ok := stmt.Clauses["WHERE"]; ok {
		if w, ok := c.Expression.(clause.Where); ok && len(w.Exprs) > 0 {
			return true
		}
	}
	if anyPrimaryKey(stmt, stmt.ReflectValue) {
		return true
	}
	return isDelete && stmt.Model != nil && anyPrimaryKey(stmt, reflect.ValueOf(stmt.Model))
}

// addCondition ANDs cond to the statement's WHERE. Conditions joined by Or are put in
// parentheses first, so that "a OR b" becomes "(a OR b) AND cond".
func addCondition(stmt *gorm.Statement, cond clause.Expression) {
	if c, ok := stmt.Clauses["WHERE"]; ok {
		if w, ok := c.Expression.(clause.Where); ok && len(w.Exprs) > 1 && slices.ContainsFunc(w.Exprs, isOr) {
			w.Exprs = []clause.Expression{clause.And(w.Exprs...)}
			c.Expression = w
			stmt.Clauses["WHERE"] = c
		}
	}
	stmt.AddClause(clause.Where{Exprs: []clause.Expression{cond}})
}

func isOr(e clause.Expression) bool {
	_, ok := e.(clause.OrConditions)
	return ok
}

// keepColumn makes Select and Omit keep the fence column: a statement restricted to
// other columns gains it, and an Omit of it is dropped.
func keepColumn(stmt *gorm.Statement, dbName, name string) {
	named := func(s string) bool { return s == dbName || s == name || s == "*" }
	if len(stmt.Selects) > 0 && !slices.ContainsFunc(stmt.Selects, named) {
		stmt.Selects = append(slices.Clip(stmt.Selects), dbName)
	}
	if slices.ContainsFunc(stmt.Omits, named) {
		stmt.Omits = slices.DeleteFunc(slices.Clone(stmt.Omits), named)
	}
}

// afterWrite tells a refused update or delete from one of a missing row, after the
// statement ran: when it changed no row, or when it could touch several (it had no
// whole primary key), it reads the rows that the statement's other conditions match.
// A row whose column is above the token means a newer holder has written: a
// StaleTokenError. No row at all, for a statement that changed none, is
// gorm.ErrRecordNotFound. Either error makes GORM's transaction roll back.
func (p *Plugin) afterWrite(db *gorm.DB) {
	stmt := db.Statement
	f := getState(stmt)
	if f == nil || db.Error != nil || db.DryRun || (f.singleRow && db.RowsAffected > 0) {
		return
	}
	var others []clause.Expression
	if c, ok := stmt.Clauses["WHERE"]; ok {
		if w, ok := c.Expression.(clause.Where); ok {
			others = slices.DeleteFunc(slices.Clone(w.Exprs), func(e clause.Expression) bool {
				_, mine := e.(fenceCond)
				return mine
			})
		}
	}
	count, mark, err := lookUp(db, f, others)
	if err != nil {
		db.AddError(fmt.Errorf("gormfence: %s: read the rows back: %w", f.resource, err))
		return
	}
	token := f.tokens[0]
	switch {
	case mark != nil && *mark > token:
		db.AddError(&store.StaleTokenError{Resource: f.resource, Token: token, Mark: *mark})
	case db.RowsAffected > 0:
	case count == 0:
		db.AddError(gorm.ErrRecordNotFound)
	case db.Dialector.Name() == "mysql":
		// MySQL counts changed rows: these matched and admit the token, but held the
		// values written already. Report them, as clientFoundRows=true would.
		db.RowsAffected = count
	default:
		db.AddError(fmt.Errorf("gormfence: %s: no row changed, yet %d rows match and admit token %d", f.resource, count, token))
	}
}

// lookUp counts the rows that match conds and returns the highest fence column among
// them, nil when none. It reads in the statement's transaction, with the statement's
// model, so that its conditions on the primary key resolve; conds hold the soft-delete
// condition already, when there is one.
func lookUp(db *gorm.DB, f *fence, conds []clause.Expression) (count int64, mark *int64, err error) {
	stmt := db.Statement
	q := db.Session(&gorm.Session{NewDB: true, SkipHooks: true}).Unscoped().
		Model(reflect.New(stmt.Schema.ModelType).Interface()).Table(stmt.Table).
		Clauses(clause.Select{Expression: clause.Expr{SQL: "COUNT(*), MAX(?)", Vars: []any{clause.Column{Name: f.field.DBName}}}})
	if len(conds) > 0 {
		q = q.Clauses(clause.Where{Exprs: conds})
	}
	rows, err := q.Rows()
	if err != nil {
		return 0, nil, err
	}
	defer rows.Close()
	if rows.Next() {
		err = rows.Scan(&count, &mark)
	}
	return count, mark, errors.Join(err, rows.Err())
}

// softDeleteSet wraps the SET clause's builder: a fenced soft delete's SET, built
// inside gorm:delete, gains the fence column. Other statements are built as before.
func softDeleteSet(next clause.ClauseBuilder) clause.ClauseBuilder {
	return func(c clause.Clause, b clause.Builder) {
		if stmt, ok := b.(*gorm.Statement); ok {
			if f := getState(stmt); f != nil && f.softDelete {
				if set, ok := c.Expression.(clause.Set); ok && !slices.ContainsFunc(set, func(a clause.Assignment) bool { return a.Column.Name == f.field.DBName }) {
					c.Expression = append(slices.Clip(set), clause.Assignment{Column: clause.Column{Name: f.field.DBName}, Value: f.tokens[0]})
				}
			}
		}
		if next != nil {
			next(c, b)
			return
		}
		c.Build(b)
	}
}

// joinKey writes a primary key's values for an error: "7", or "7,eu" for a composite
// key.
func joinKey(values []any) string {
	s := make([]string, len(values))
	for i, v := range values {
		s[i] = fmt.Sprint(v)
	}
	return strings.Join(s, ",")
}
