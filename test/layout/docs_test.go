package layout_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestEveryPackageAndExportedNameIsDocumented is the lint `go vet` does not
// do: every package of the product tree (pkg/) and every other Go package
// of the repository has a package comment, one only, naming the package
// the way godoc shows it ("Package store ...", "Command sweeper ..." or
// "<Name> ..." for a main), and every exported identifier of pkg/ has a
// doc comment. Issue 43 found three package comments naming the wrong
// package and one package with none.
func TestEveryPackageAndExportedNameIsDocumented(t *testing.T) {
	pkgs := map[string][]*ast.File{} // directory -> its non-test files
	fset := token.NewFileSet()
	for _, dir := range []string{"pkg", "services", "tools", "test"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
			if err != nil {
				return err
			}
			if generated(f) {
				return nil
			}
			pkgs[filepath.Dir(path)] = append(pkgs[filepath.Dir(path)], f)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	dirs := make([]string, 0, len(pkgs))
	for d := range pkgs {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for _, dir := range dirs {
		rel, _ := filepath.Rel(root, dir)
		var docs []string
		for _, f := range pkgs[dir] {
			if f.Doc != nil {
				docs = append(docs, f.Doc.Text())
			}
		}
		name := pkgs[dir][0].Name.Name
		switch {
		case len(docs) == 0:
			t.Errorf("%s: package %s has no package comment", rel, name)
		case len(docs) > 1:
			t.Errorf("%s: package %s has %d package comments, want one", rel, name, len(docs))
		case name == "main":
			if strings.HasPrefix(docs[0], "Package ") {
				t.Errorf("%s: a command's comment says what it does (\"Command %s ...\"), not \"Package\"", rel, filepath.Base(dir))
			}
		case !strings.HasPrefix(docs[0], "Package "+name+" ") && !strings.HasPrefix(docs[0], "Package "+name+"\n"):
			t.Errorf("%s: the package comment must begin \"Package %s\", it begins %q", rel, name, firstWords(docs[0]))
		}
		if !strings.HasPrefix(rel, "pkg"+string(filepath.Separator)) {
			continue
		}
		for _, f := range pkgs[dir] {
			for _, miss := range undocumented(f) {
				t.Errorf("%s: %s has no doc comment", fset.Position(miss.Pos()).String()[len(root)+1:], miss.Name)
			}
		}
	}
}

// generated says f is generated code ("Code generated ... DO NOT EDIT.").
func generated(f *ast.File) bool {
	for _, cg := range f.Comments {
		for _, c := range cg.List {
			if strings.HasPrefix(c.Text, "// Code generated ") && strings.HasSuffix(c.Text, " DO NOT EDIT.") {
				return true
			}
		}
		if cg.Pos() > f.Package {
			break
		}
	}
	return false
}

func firstWords(s string) string {
	if i := strings.IndexAny(s, ".\n"); i > 0 && i < 60 {
		return s[:i]
	}
	return s[:min(len(s), 60)]
}

// undocumented lists f's exported top-level names (and exported methods
// of exported types) without a doc comment. A name in a group declaration
// is documented by the group's comment.
func undocumented(f *ast.File) []*ast.Ident {
	var out []*ast.Ident
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() || d.Doc != nil {
				continue
			}
			if d.Recv != nil && !exportedRecv(d.Recv) {
				continue
			}
			out = append(out, d.Name)
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() && s.Doc == nil && d.Doc == nil {
						out = append(out, s.Name)
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() && s.Doc == nil && d.Doc == nil && s.Comment == nil {
							out = append(out, n)
						}
					}
				}
			}
		}
	}
	return out
}

func exportedRecv(r *ast.FieldList) bool {
	if len(r.List) == 0 {
		return false
	}
	t := r.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if g, ok := t.(*ast.IndexExpr); ok {
		t = g.X
	}
	if g, ok := t.(*ast.IndexListExpr); ok {
		t = g.X
	}
	id, ok := t.(*ast.Ident)
	return ok && id.IsExported()
}
