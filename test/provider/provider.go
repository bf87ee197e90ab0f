package main

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
)

// testingProvider has no settings: its resources name their files.
type testingProvider struct{}

func newProvider() provider.Provider { return testingProvider{} }

func (testingProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "testing"
	resp.Version = version
}

func (testingProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{Description: "Files on the executor's disk, for terrarun's tests."}
}

func (testingProvider) Configure(context.Context, provider.ConfigureRequest, *provider.ConfigureResponse) {
}

func (testingProvider) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{newFileResource}
}

func (testingProvider) DataSources(context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{newFileDataSource}
}
