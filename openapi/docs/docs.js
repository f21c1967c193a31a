// Renders the API reference from the service's own spec, with every asset
// served by the service: nothing is fetched from anywhere else.
"use strict";
window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  deepLinking: true,
  docExpansion: "list",
  defaultModelsExpandDepth: 0,
  displayOperationId: true,
  displayRequestDuration: true,
  // The public validator badge would call validator.swagger.io.
  validatorUrl: null,
  layout: "BaseLayout",
  presets: [SwaggerUIBundle.presets.apis],
});
