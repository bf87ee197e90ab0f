package terraformrunpolicy

import "github.com/terrarun/terrarun/pkg/admission/initializer"

// NamespaceLabeler returns the labels of a namespace. It is defined in package
// initializer, which hands it to the plugin, and aliased here so that callers
// of this package need not import both.
type NamespaceLabeler = initializer.NamespaceLabeler
