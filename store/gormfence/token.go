package gormfence

import (
	"context"
	"fmt"
	"reflect"

	"github.com/fencekit/fencekit/fencing"
	"gorm.io/gorm"
	"gorm.io/gorm/schema"
)

// resourcer is a model that names the lock resource its rows are written under.
type resourcer interface {
	FenceResource() string
}

// fence is what the plugin recorded about a fenced statement, for the callbacks
// after it.
type fence struct {
	field *schema.Field
	// tokens holds each row's token; for an update or delete, the statement's one.
	tokens []int64
	// rows are the rows of a create, in the order of tokens.
	rows []reflect.Value
	// resource names the write in errors: the model's FenceResource, "table/key", or
	// the table.
	resource string
	// singleRow: the statement is keyed by a whole primary key, so it touches one row
	// at most.
	singleRow bool
	// upsert: a create with ON CONFLICT DO UPDATE.
	upsert bool
	// softDelete: a delete that GORM runs as an UPDATE.
	softDelete bool
}

// stateKey is the key of the fence in the statement's settings.
func stateKey(stmt *gorm.Statement) string {
	return fmt.Sprintf("gormfence:%p", stmt)
}

func setState(stmt *gorm.Statement, f *fence) { stmt.Settings.Store(stateKey(stmt), f) }

func getState(stmt *gorm.Statement) *fence {
	if v, ok := stmt.Settings.Load(stateKey(stmt)); ok {
		return v.(*fence)
	}
	return nil
}

// fenceField returns the statement's fence column, or nil when its model has none.
func (p *Plugin) fenceField(stmt *gorm.Statement) *schema.Field {
	if stmt.Schema == nil {
		return nil
	}
	f := stmt.Schema.LookUpField(p.column)
	if f == nil || f.DBName == "" {
		return nil
	}
	return f
}

// rowToken returns the token of a row v: of its FenceResource (fencing.TokenFor) when
// its model has that method and it names a resource, else the context's
// (fencing.TokenFromContext). ok is false when there is none.
func rowToken(ctx context.Context, v reflect.Value) (token int64, resource string, ok bool) {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			break
		}
		v = v.Elem()
	}
	if v.IsValid() && v.Kind() == reflect.Struct {
		var r resourcer
		if v.CanAddr() {
			r, _ = v.Addr().Interface().(resourcer)
		} else {
			r, _ = v.Interface().(resourcer)
		}
		if r != nil {
			if resource = r.FenceResource(); resource != "" {
				token, ok = fencing.TokenFor(ctx, resource)
				return token, resource, ok
			}
		}
	}
	token, ok = fencing.TokenFromContext(ctx)
	return token, "", ok
}

// rowsOf returns the rows of v: its elements when it is a slice or array, else v.
func rowsOf(v reflect.Value) []reflect.Value {
	switch v.Kind() {
	case reflect.Slice, reflect.Array:
		rows := make([]reflect.Value, v.Len())
		for i := range rows {
			rows[i] = v.Index(i)
		}
		return rows
	}
	return []reflect.Value{v}
}

// tokens returns the token of each row for a fenced statement of op. It returns ok
// false, with no error, when the rows carry no token and the plugin allows unfenced
// writes; an error when they carry none (ErrNoToken) or an invalid one.
func (p *Plugin) tokens(stmt *gorm.Statement, op string, rows []reflect.Value) (tokens []int64, resource string, ok bool, err error) {
	tokens = make([]int64, len(rows))
	for i, row := range rows {
		tok, res, found := rowToken(stmt.Context, row)
		if !found {
			if p.allowUnfenced {
				return nil, "", false, nil
			}
			what := stmt.Table
			if res != "" {
				what = fmt.Sprintf("%s (resource %q)", stmt.Table, res)
			}
			return nil, "", false, fmt.Errorf("%w: %s of %s", ErrNoToken, op, what)
		}
		if tok < 1 {
			return nil, "", false, invalid("gormfence: %s of %s: invalid fencing token %d: tokens start at 1", op, stmt.Table, tok)
		}
		tokens[i] = tok
		if i == 0 {
			resource = res
		}
	}
	return tokens, resource, true, nil
}

// primaryKey returns the values of v's primary key fields, whether all of them are
// set (none is the zero value), and whether some is.
func primaryKey(stmt *gorm.Statement, v reflect.Value) (values []any, whole, some bool) {
	for v.Kind() == reflect.Pointer && !v.IsNil() {
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct || len(stmt.Schema.PrimaryFields) == 0 || v.Type() != stmt.Schema.ModelType {
		return nil, false, false
	}
	whole = true
	for _, f := range stmt.Schema.PrimaryFields {
		value, zero := f.ValueOf(stmt.Context, v)
		whole = whole && !zero
		some = some || !zero
		values = append(values, value)
	}
	return values, whole, some
}

// anyPrimaryKey reports whether some row of v has a primary key field set: GORM then
// adds the row's key to the statement's WHERE.
func anyPrimaryKey(stmt *gorm.Statement, v reflect.Value) bool {
	for _, row := range rowsOf(reflect.Indirect(v)) {
		if _, _, some := primaryKey(stmt, row); some {
			return true
		}
	}
	return false
}
