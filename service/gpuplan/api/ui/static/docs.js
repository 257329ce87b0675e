// Starts Swagger UI (shipped in this package) on the service's own OpenAPI document.
// validatorUrl: null keeps the viewer from loading a badge from validator.swagger.io.
"use strict";
(function () {
  const root = document.getElementById("swagger-ui");
  window.ui = window.SwaggerUIBundle({
    url: root.dataset.url,
    domNode: root,
    deepLinking: true,
    validatorUrl: null,
    presets: [window.SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
    defaultModelsExpandDepth: 0,
  });
})();
