package main

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	dschema "github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// fileModel is a testing_file: a file at path holding content, then
// sensitive_content.
type fileModel struct {
	ID               types.String `tfsdk:"id"`
	Path             types.String `tfsdk:"path"`
	Content          types.String `tfsdk:"content"`
	SensitiveContent types.String `tfsdk:"sensitive_content"`
}

// fileResource keeps a file. Read reports what is on disk: a changed file
// is drift that the next plan updates, a removed one is re-created.
type fileResource struct{}

func newFileResource() resource.Resource { return fileResource{} }

func (fileResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_file"
}

func (fileResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A file on the executor's disk.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed:      true,
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"path": schema.StringAttribute{
				Required:      true,
				Description:   "Absolute path of the file; changing it replaces the resource.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"content":           schema.StringAttribute{Required: true},
			"sensitive_content": schema.StringAttribute{Optional: true, Sensitive: true, Description: "Written after content."},
		},
	}
}

func (fileResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	resp.Diagnostics.Append(save(ctx, req.Plan, &resp.State)...)
}

func (fileResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m fileModel
	if resp.Diagnostics.Append(req.State.Get(ctx, &m)...); resp.Diagnostics.HasError() {
		return
	}
	b, err := os.ReadFile(m.Path.ValueString())
	if errors.Is(err, fs.ErrNotExist) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		resp.Diagnostics.AddError("Reading the file", err.Error())
		return
	}
	content := string(b)
	if s := m.SensitiveContent.ValueString(); s != "" {
		if rest, ok := strings.CutSuffix(content, s); ok {
			content = rest
		} else {
			m.SensitiveContent = types.StringValue("")
		}
	}
	m.Content = types.StringValue(content)
	resp.Diagnostics.Append(resp.State.Set(ctx, m)...)
}

func (fileResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	resp.Diagnostics.Append(save(ctx, req.Plan, &resp.State)...)
}

// save writes the planned file and records it in state.
func save(ctx context.Context, plan tfsdk.Plan, state *tfsdk.State) diag.Diagnostics {
	var m fileModel
	diags := plan.Get(ctx, &m)
	if diags.HasError() {
		return diags
	}
	if err := writeFile(m); err != nil {
		diags.AddError("Writing the file", err.Error())
		return diags
	}
	m.ID = m.Path
	return append(diags, state.Set(ctx, m)...)
}

func (fileResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m fileModel
	if resp.Diagnostics.Append(req.State.Get(ctx, &m)...); resp.Diagnostics.HasError() {
		return
	}
	if err := os.Remove(m.Path.ValueString()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		resp.Diagnostics.AddError("Removing the file", err.Error())
	}
}

func writeFile(m fileModel) error {
	p := m.Path.ValueString()
	if !filepath.IsAbs(p) {
		return errors.New("path must be absolute")
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, []byte(m.Content.ValueString()+m.SensitiveContent.ValueString()), 0o644)
}

// fileDataSource reads a file.
type fileDataSource struct{}

func newFileDataSource() datasource.DataSource { return fileDataSource{} }

// fileData is the data source's model.
type fileData struct {
	Path    types.String `tfsdk:"path"`
	Content types.String `tfsdk:"content"`
}

func (fileDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_file"
}

func (fileDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = dschema.Schema{
		Description: "Reads a file on the executor's disk.",
		Attributes: map[string]dschema.Attribute{
			"path":    dschema.StringAttribute{Required: true},
			"content": dschema.StringAttribute{Computed: true},
		},
	}
}

func (fileDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var d fileData
	if resp.Diagnostics.Append(req.Config.Get(ctx, &d)...); resp.Diagnostics.HasError() {
		return
	}
	b, err := os.ReadFile(d.Path.ValueString())
	if err != nil {
		resp.Diagnostics.AddError("Reading the file", err.Error())
		return
	}
	d.Content = types.StringValue(string(b))
	resp.Diagnostics.Append(resp.State.Set(ctx, d)...)
}
