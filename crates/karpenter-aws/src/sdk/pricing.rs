//! [`PricingApi`] over aws-sdk-pricing (`GetProducts`) and aws-sdk-ec2 (`DescribeSpotPriceHistory`).

use async_trait::async_trait;
use aws_sdk_pricing::types::{Filter, FilterType};
use chrono::{DateTime, Utc};

use super::{api_error, build_error, from_chrono, to_chrono};
use crate::api_error::AwsApiError;
use crate::pricing_api::{
    OnDemandPrice, PricingApi, SPOT_PRODUCT_DESCRIPTIONS, SpotPrice, currency, on_demand_filters, parse_price_list_item,
};

/// Page size of `GetProducts` (its maximum).
const PRODUCTS_PAGE: i32 = 100;
/// Page size of `DescribeSpotPriceHistory` (its maximum).
const SPOT_PAGE: i32 = 1000;

/// Price calls.
#[derive(Clone, Debug)]
pub struct PricingAdapter {
    pricing: aws_sdk_pricing::Client,
    ec2: aws_sdk_ec2::Client,
}

impl PricingAdapter {
    /// The adapter over a Pricing API client (in its serving region) and an EC2 client.
    pub fn new(pricing: aws_sdk_pricing::Client, ec2: aws_sdk_ec2::Client) -> Self {
        Self { pricing, ec2 }
    }
}

#[async_trait]
impl PricingApi for PricingAdapter {
    async fn on_demand_prices(&self, region: &str) -> Result<Vec<OnDemandPrice>, AwsApiError> {
        let currency = currency(region);
        let mut prices = Vec::new();
        for query in on_demand_filters(region) {
            let mut request = self.pricing.get_products().service_code("AmazonEC2").max_results(PRODUCTS_PAGE);
            for (field, value) in query {
                let filter = Filter::builder()
                    .r#type(FilterType::TermMatch)
                    .field(field)
                    .value(value)
                    .build()
                    .map_err(|e| build_error("GetProducts", e))?;
                request = request.filters(filter);
            }
            let mut pages = request.into_paginator().send();
            while let Some(page) = pages.next().await {
                let page = page.map_err(|e| api_error("GetProducts", e))?;
                prices.extend(page.price_list().iter().filter_map(|doc| parse_price_list_item(doc, currency)));
            }
        }
        Ok(prices)
    }

    async fn spot_prices(&self, start_time: DateTime<Utc>) -> Result<Vec<SpotPrice>, AwsApiError> {
        let mut request =
            self.ec2.describe_spot_price_history().start_time(from_chrono(start_time)).max_results(SPOT_PAGE);
        for d in SPOT_PRODUCT_DESCRIPTIONS {
            request = request.product_descriptions(d);
        }
        let mut pages = request.into_paginator().send();
        let mut prices = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| api_error("DescribeSpotPriceHistory", e))?;
            prices.extend(page.spot_price_history().iter().filter_map(|p| {
                Some(SpotPrice {
                    instance_type: p.instance_type()?.as_str().to_owned(),
                    zone: p.availability_zone()?.to_owned(),
                    price: p.spot_price()?.parse().ok()?,
                    timestamp: p.timestamp().and_then(to_chrono),
                })
            }));
        }
        Ok(prices)
    }
}
