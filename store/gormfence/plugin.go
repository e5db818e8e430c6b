package gormfence

import (
	"errors"
	"fmt"
	"strings"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// DefaultColumn is the fence column's default name.
const DefaultColumn = "fence_token"

// Plugin is the GORM plugin that fences writes; install it with db.Use(New()). It
// keeps no state of its own after Initialize and is safe for concurrent use, as the
// *gorm.DB it is installed on is. Make one with [New]: the zero value and a nil
// *Plugin have no fence column, and their Initialize returns an error matching
// [store.ErrInvalid].
type Plugin struct {
	column        string
	allowUnfenced bool
}

// Option configures the [Plugin].
type Option interface {
	apply(*Plugin)
}

type optionFunc func(*Plugin)

func (f optionFunc) apply(p *Plugin) { f(p) }

// WithColumn names the fence column, as a database column name (fence_token) or as
// the struct field's name (FenceToken). Default: "fence_token". An empty name makes
// Initialize fail.
func WithColumn(name string) Option {
	return optionFunc(func(p *Plugin) { p.column = name })
}

// AllowUnfenced lets fenced models be written under a context without a token, and
// writes them unfenced. Default: such a write fails with an error matching
// [ErrNoToken] and runs nothing.
func AllowUnfenced() Option {
	return optionFunc(func(p *Plugin) { p.allowUnfenced = true })
}

// New returns the plugin, configured by opts (nil options are ignored).
func New(opts ...Option) *Plugin {
	p := &Plugin{column: DefaultColumn}
	for _, o := range opts {
		if o != nil {
			o.apply(p)
		}
	}
	return p
}

// Name returns "gormfence", the name GORM registers the plugin under.
func (p *Plugin) Name() string { return "gormfence" }

// Initialize registers the plugin's callbacks around gorm:create, gorm:update and
// gorm:delete (the ones after them run before the default transaction commits), and, on MySQL, its builder of ON DUPLICATE KEY UPDATE. GORM calls it
// from db.Use. It returns an error matching [store.ErrInvalid], and registers nothing,
// if the column name is empty or db is nil or was not made by gorm.Open; an error if
// a callback cannot be registered.
func (p *Plugin) Initialize(db *gorm.DB) error {
	if p == nil || strings.TrimSpace(p.column) == "" {
		return invalid("gormfence: empty fence column name")
	}
	if db == nil || db.Config == nil || db.Callback() == nil || db.Dialector == nil {
		return invalid("gormfence: initialize: a *gorm.DB not made by gorm.Open")
	}
	cb := db.Callback()
	if err := errors.Join(
		cb.Create().Before("gorm:create").Register("gormfence:before_create", p.beforeCreate),
		cb.Create().Before("gorm:save_after_associations").Register("gormfence:after_create", p.afterCreate),
		cb.Update().Before("gorm:update").Register("gormfence:before_update", p.beforeUpdate),
		cb.Update().Before("gorm:save_after_associations").Register("gormfence:after_update", p.afterWrite),
		cb.Delete().Before("gorm:delete").Register("gormfence:before_delete", p.beforeDelete),
		cb.Delete().Before("gorm:after_delete").Register("gormfence:after_delete", p.afterWrite),
	); err != nil {
		return fmt.Errorf("gormfence: register callbacks: %w", err)
	}
	if db.ClauseBuilders == nil {
		db.ClauseBuilders = map[string]clause.ClauseBuilder{}
	}
	// A soft delete's UPDATE is built inside gorm:delete, from a SET clause that
	// replaces any other: the fence column joins it as it is built.
	db.ClauseBuilders["SET"] = softDeleteSet(db.ClauseBuilders["SET"])
	if db.Dialector.Name() == "mysql" {
		db.ClauseBuilders["ON CONFLICT"] = mysqlOnConflict(db.ClauseBuilders["ON CONFLICT"])
	}
	return nil
}
